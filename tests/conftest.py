"""Suite-wide set-up: the `native` marker, and property tests that draw the same examples on
every run (a red CI run must be one anyone can reproduce; `make fuzz` explores at random).

The suite passes on either backend (`KILN_BACKEND=interpret make test` runs the user-level
tests through the interpreter: `make test-interpret`). Tests about the native backend's own
workings (its kernels, BLAS calls, the engine's modules and threads, memory plans, the disk
cache, the call path) are marked `native`: they run on the native backend whatever KILN_BACKEND
says, and so do the processes they start. A module marks all its tests with
`pytestmark = pytest.mark.native`; tests/codegen/ is native as a whole (its conftest).
"""

import pytest
from hypothesis import settings

import kiln

settings.register_profile("kiln", derandomize=True, database=None)
settings.load_profile("kiln")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "native: the test checks the native backend's own workings; it runs on that backend "
        "whatever KILN_BACKEND says",
    )


@pytest.fixture(autouse=True)
def native_backend_where_marked(request, monkeypatch):
    """For a test marked `native`: the native backend, here and in the processes it starts."""
    if request.node.get_closest_marker("native") is not None:
        monkeypatch.setattr(kiln.config, "backend", "native")
        monkeypatch.setenv("KILN_BACKEND", "native")
