"""On-call asks the broker for its end offsets every 30 s. With the broker stopped, the Kafka client waited out its
2 s timeout each time (2 of a cold On-call's 4.6 s on the demo's home, and the warehouse held meanwhile). A stopped
broker refuses a TCP connection at once: `routerscope.core.kafka.listening` asks that first."""

from __future__ import annotations

import socket

import pytest

from routerscope.core import kafka
from routerscope.core.settings import Settings
from tests.support.kafka import count_admin_clients


@pytest.mark.parametrize(
    "bootstrap, servers",
    [
        ("127.0.0.1:9092", [("127.0.0.1", 9092)]),
        ("a:1, b:2", [("a", 1), ("b", 2)]),
        ("SASL_SSL://kafka.example:9093", [("kafka.example", 9093)]),
        ("[::1]:9092", [("::1", 9092)]),
        ("kafka.example", None),  # no port: left to the Kafka client
        ("a:1,b:port", None),
        ("", None),
    ],
)
def test_a_bootstrap_list_is_read_as_host_and_port_pairs(bootstrap, servers):
    assert kafka._servers(bootstrap) == servers


def test_a_listening_server_is_found_and_a_closed_port_is_not():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert kafka.listening(f"127.0.0.1:{port}")
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))  # bound, never listening: a connection to it is refused
            dead = closed.getsockname()[1]
            assert not kafka.listening(f"127.0.0.1:{dead}")
            assert kafka.listening(f"127.0.0.1:{dead},127.0.0.1:{port}")  # any server of the list will do
    assert kafka.listening("no-port-here")  # unreadable: the Kafka client decides


def test_end_offsets_of_a_refused_port_are_unknown_without_making_a_kafka_client(tmp_path, monkeypatch):
    """A real closed port (no broker there); the Kafka client's constructor is watched, not replaced: every call
    goes through to the real one (tests/integration/test_broker.py does the same against a real broker stopped)."""
    made = count_admin_clients(monkeypatch)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        settings = Settings.from_env(
            {"ROUTERSCOPE_HOME": str(tmp_path), "ROUTERSCOPE_KAFKA_BOOTSTRAP": f"127.0.0.1:{closed.getsockname()[1]}"}
        )
        assert kafka.end_offsets(settings) is None
    assert made == []
