"""The end-to-end tier: whole commands as a user runs them (the demo, the daemon, the replay, the real model,
the wheel). Every test under this folder is marked `e2e`, so `make test-fast` leaves the tier out and
`pytest -m e2e` runs it alone."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # a conftest's collection hook sees every item of the run, not only this folder's
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built once per run (per worker) for every test that installs it."""
    from tests.support.wheel import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel-build"))
