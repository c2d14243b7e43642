"""kiln.nn (being written)."""
