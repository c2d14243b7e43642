"""Every codegen test runs once per target in CODEGEN_TARGETS (the host and the baselines this
machine can run), so that code that differs between CPUs is exercised on every machine."""

import pytest

from tests._testing import CODEGEN_TARGETS, use_codegen_target


@pytest.fixture(autouse=True, params=CODEGEN_TARGETS)
def codegen_target(request):
    with use_codegen_target(request.param) as current:
        yield current
