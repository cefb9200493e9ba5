"""Fixtures of the integration tier: a broker of a test's own, an empty migrated warehouse, and a broker
that is not up yet. Every one is real (Tansu, embedded chDB); the shared ones are in `tests/conftest.py`."""

from __future__ import annotations

import pytest

from routerscope.core import broker
from routerscope.core.procs import free_port
from routerscope.warehouse.client import open_warehouse
from tests.support.home import settings_for


@pytest.fixture
def stack(home):
    """A fresh broker (its own topics, empty) and an empty embedded warehouse, both in this test's home."""
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    yield settings
    broker.stop(settings)


@pytest.fixture
def warehouse(home):
    """A client of an empty, migrated embedded warehouse in this test's home."""
    settings = settings_for(home)
    with open_warehouse(settings, purpose="test", migrated=True) as client:
        yield client


@pytest.fixture
def down_broker(home):
    """Settings pointing at a loopback port where no broker runs yet; `tests.support.kafka.start(state)` brings
    it up there."""
    port = free_port()
    settings = settings_for(home, ROUTERSCOPE_KAFKA_BOOTSTRAP=f"127.0.0.1:{port}")
    state = {"settings": settings, "port": port}
    yield state
    broker.stop(settings)
