"""Run every benchmark in this folder, one after the other, printing their tables."""
from __future__ import annotations

import pathlib
import runpy
import sys

HERE = pathlib.Path(__file__).parent


def main() -> None:
    sys.path.insert(0, str(HERE))
    for path in sorted(HERE.glob("bench_*.py")):
        print(f"\n##### {path.name}")
        runpy.run_path(str(path), run_name="__main__")


if __name__ == "__main__":
    main()
