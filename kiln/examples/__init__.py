"""Runnable examples of kiln, each a module with a `main()`: `python -m kiln.examples` lists
them, `python -m kiln.examples.NAME` runs one. Their data ship in `kiln/examples/data`.
"""
