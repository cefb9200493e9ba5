"""A disk that refuses the outbox's writes: `collect` answers 503 (never a 200 for what is not on disk),
says so on `/-/ready`, and takes spans again as soon as the disk does; nothing answered 200 is lost."""

from __future__ import annotations

import errno
import http.client
import json

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from routerscope.core import broker
from routerscope.core.procs import free_port
from routerscope.instrumentation import emitter as emitter_module
from tests.support.home import settings_for
from tests.support.kafka import consume_all
from tests.support.otlp import fallback_trace, finished_spans, running_receiver

pytestmark = pytest.mark.integration


def post(port: int, body: bytes) -> tuple[int, str | None]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"})
        response = conn.getresponse()
        response.read()
        return response.status, response.getheader("Retry-After")
    finally:
        conn.close()


def ready(port: int) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/-/ready")
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_a_full_disk_gets_503_and_nothing_answered_200_is_lost(home, monkeypatch):
    settings = settings_for(home)
    broker.start(settings, port=free_port())
    full = {"on": False}
    real_write = emitter_module._os_write

    def write(fd, data):
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(emitter_module, "_os_write", write)
    try:
        bodies = [encode_spans(finished_spans(fallback_trace)).SerializeToString() for _ in range(3)]
        with running_receiver(settings) as receiver:
            assert post(receiver.port, bodies[0]) == (200, None)
            full["on"] = True
            assert post(receiver.port, bodies[1]) == (503, "5")
            status, doc = ready(receiver.port)
            assert status == 503 and doc["ready"] is False
            full["on"] = False
            assert post(receiver.port, bodies[1]) == (200, None)  # the exporter's retry
            assert post(receiver.port, bodies[2]) == (200, None)
            assert ready(receiver.port)[0] == 200
        messages = consume_all(settings.kafka_bootstrap(), settings.otlp_topic, expect=3)
        assert len(messages) == 3 and len({m.key() for m in messages}) == 3
        for path in (home / "collect", home / "collect" / "outbox", home / "collect" / "waiting"):
            assert path.stat().st_mode & 0o777 == 0o700  # owner-only: what it holds came from the apps
    finally:
        broker.stop(settings)


def test_with_fsync_interval_0_what_is_answered_200_was_fsynced_first(home, monkeypatch):
    """`--fsync-interval 0`: the outbox file is fsynced before the answer (power loss, not only kill -9)."""
    import os

    from routerscope.instrumentation.otlp import receiver as receiver_module

    settings = settings_for(home)
    broker.start(settings, port=free_port())
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(receiver_module.os, "fsync", fsync)
    try:
        body = encode_spans(finished_spans(fallback_trace)).SerializeToString()
        with running_receiver(settings, fsync_interval_s=0) as receiver:
            assert post(receiver.port, body) == (200, None)
            assert any(path.endswith(".jsonl") for path in synced)  # the outbox segment, before the 200
    finally:
        broker.stop(settings)
