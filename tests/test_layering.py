"""The package layers of ARCHITECTURE.md hold: core/ and primitives/ never import the compiler,
codegen, runtime or kiln.numpy, kiln/ never imports JAX or PyTorch, and only kiln/config.py
reads the environment.

Every file is parsed with `ast`, so an import inside a function counts as much as one at the top
of the module. Where a lower layer needs something from above at run time, the upper layer
registers a hook (as kiln.numpy.array_methods attaches the operators of kiln.Array); there is no
exception list.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

KILN = pathlib.Path(__file__).resolve().parent.parent / "kiln"

LOWER_PACKAGES = ("core", "primitives")
UPPER_MODULES = ("kiln.compiler", "kiln.codegen", "kiln.runtime", "kiln.numpy")
# Imports of an upper module allowed from core/ or primitives/, as (file, module) pairs. Keep it
# empty: a genuine run-time need goes through a hook that the upper layer registers.
ALLOWED_UPWARD_IMPORTS: set[tuple[str, str]] = set()
FOREIGN_FRAMEWORKS = ("jax", "jaxlib", "torch")
# The one module that reads environment variables; every other module asks `config`.
ENVIRONMENT_READER = "config.py"
ENVIRONMENT_NAMES = ("environ", "environb", "getenv", "getenvb")


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(KILN.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_modules(path: pathlib.Path) -> list[tuple[int, str]]:
    """Every module `path` imports, anywhere in the file, as (line, absolute dotted name).
    `from a import b` yields both `a` and `a.b`, since `b` may be a submodule; relative imports
    are resolved against the file's package; `importlib.import_module("...")` and
    `__import__("...")` with a literal name count too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.append((node.lineno, module))
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__"):
                found.append((node.lineno, node.args[0].value))
    return found


def _is_within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _files(*packages: str) -> list[pathlib.Path]:
    roots = [KILN / p for p in packages] if packages else [KILN]
    return sorted(f for root in roots for f in root.rglob("*.py"))


def test_the_scanned_packages_exist():
    # A renamed package would otherwise make the checks below pass vacuously.
    for package in LOWER_PACKAGES:
        assert len(_files(package)) > 3, package
    for module in UPPER_MODULES:
        assert (KILN / module.split(".")[1]).is_dir(), module


@pytest.mark.parametrize("package", LOWER_PACKAGES)
def test_lower_layers_do_not_import_upper_layers(package):
    violations = []
    for path in _files(package):
        relative = str(path.relative_to(KILN.parent))
        for line, module in _imported_modules(path):
            for upper in UPPER_MODULES:
                if _is_within(module, upper) and (relative, upper) not in ALLOWED_UPWARD_IMPORTS:
                    violations.append(f"{relative}:{line} imports {module}")
    assert not violations, "\n".join(violations)


def test_kiln_never_imports_a_foreign_framework():
    violations = []
    for path in _files():
        for line, module in _imported_modules(path):
            if module.split(".")[0] in FOREIGN_FRAMEWORKS:
                violations.append(f"{path.relative_to(KILN.parent)}:{line} imports {module}")
    assert not violations, "\n".join(violations)


def test_the_import_scanner_sees_lazy_and_relative_imports(tmp_path, monkeypatch):
    # The checker itself must be able to fail: a function-level import, a `from kiln import
    # numpy`, a relative import and an import_module call are all found.
    package = tmp_path / "kiln" / "core"
    package.mkdir(parents=True)
    source = package / "probe.py"
    source.write_text(
        "import importlib\n"
        "def f():\n"
        "    from kiln.runtime import engine\n"
        "    from kiln import numpy\n"
        "    from ..compiler import lower\n"
        "    importlib.import_module('kiln.codegen.llvm')\n"
    )
    monkeypatch.setitem(globals(), "KILN", tmp_path / "kiln")
    modules = {m for _, m in _imported_modules(source)}
    assert {"kiln.runtime", "kiln.numpy", "kiln.compiler.lower", "kiln.codegen.llvm"} <= modules


def _environment_reads(path: pathlib.Path) -> list[tuple[int, str]]:
    """Every place `path` touches the process environment, as (line, what): `os.environ`,
    `os.getenv` and their bytes forms, whether reached as attributes of `os` or imported by
    name (`from os import environ`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ENVIRONMENT_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            found.append((node.lineno, f"os.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found.extend(
                (node.lineno, f"from os import {alias.name}")
                for alias in node.names
                if alias.name in ENVIRONMENT_NAMES
            )
    return found


def test_only_config_reads_the_environment():
    violations = []
    for path in _files():
        relative = path.relative_to(KILN)
        if str(relative) == ENVIRONMENT_READER:
            continue
        for line, what in _environment_reads(path):
            violations.append(f"kiln/{relative}:{line} uses {what}")
    assert not violations, "\n".join(violations)
    assert _environment_reads(KILN / ENVIRONMENT_READER), "config.py no longer reads anything"


def test_the_environment_scanner_sees_every_form(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text(
        "import os\n"
        "from os import environ as env\n"
        "def f():\n"
        "    return os.environ.get('A'), os.getenv('B'), os.environ['C']\n"
    )
    found = [what for _, what in _environment_reads(source)]
    assert sorted(found) == ["from os import environ", "os.environ", "os.environ", "os.getenv"]


def test_import_kiln_leaves_heavy_optional_modules_unloaded():
    # scipy.special (with numpy.testing and numpy.f2py behind it) took ~170 ms, half of what
    # `import kiln` took; only the reference impls of special functions need it, on first use.
    import subprocess
    import sys

    code = (
        "import sys, kiln, kiln.numpy, kiln.lax, kiln.nn, kiln.random\n"
        "heavy = [m for m in ('scipy.special', 'numpy.f2py', 'fractions') if m in sys.modules]\n"
        "import kiln.scipy.special as s; import numpy as np\n"
        "value = float(s.erf(np.float32(0.5)))\n"
        "print(heavy, 'scipy.special' in sys.modules, round(value, 6))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["[]", "True", "0.5205"]
