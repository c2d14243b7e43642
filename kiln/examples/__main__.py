"""List the runnable examples with the first line of each one's docstring."""

from __future__ import annotations

import ast
import pathlib
import pkgutil
import sys

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent


def examples() -> list[tuple[str, str]]:
    """(module name, one-line summary) of every example, read without importing it."""
    found = []
    for module in pkgutil.iter_modules([str(PACKAGE_DIR)]):
        if module.name.startswith("_") or module.ispkg:
            continue
        source = (PACKAGE_DIR / f"{module.name}.py").read_text(encoding="utf-8")
        docstring = ast.get_docstring(ast.parse(source)) or ""
        found.append((module.name, docstring.split("\n", 1)[0]))
    return sorted(found)


def main() -> int:
    found = examples()
    width = max(len(name) for name, _ in found)
    print("Examples (run one with `python -m kiln.examples.NAME`):")
    for name, summary in found:
        print(f"  {name:<{width}}  {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
