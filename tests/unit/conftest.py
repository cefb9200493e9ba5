"""The unit tier: the code in process, no broker (an embedded warehouse in a temporary home at the most).
The shared fixtures are in `tests/conftest.py`; builders and fakes in `tests/support/`."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def broker_settings():
    """A unit test starts no broker: one that needs it belongs in `tests/integration/`."""
    pytest.fail("a unit test asked for a broker: move it to tests/integration/", pytrace=False)
