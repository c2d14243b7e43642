"""Every codegen test runs once per target in CODEGEN_TARGETS (the host and the baselines this
machine can run), so that code that differs between CPUs is exercised on every machine, and on
the native backend whatever KILN_BACKEND says (the `native` marker, tests/conftest.py)."""

import pathlib

import pytest

from tests._testing import CODEGEN_TARGETS, use_codegen_target

_HERE = pathlib.Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if _HERE in pathlib.Path(item.path).parents:
            item.add_marker(pytest.mark.native)


@pytest.fixture(autouse=True, params=CODEGEN_TARGETS)
def codegen_target(request):
    with use_codegen_target(request.param) as current:
        yield current
