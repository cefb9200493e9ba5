"""Streams cut mid-way, through each real instrumentation from PyPI (OpenLLMetry 0.62.4, OpenTelemetry's
openai-v2 2.4b0, OpenInference's openai 0.1.66; tests/support/otlp_streams.py runs each as its own process
against a local OpenAI-compatible server whose device port drops the connection after two chunks), stripped
as `collect` strips them and mapped as `load` maps them: every field equals the truth the script planted."""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys

import pytest

from tests.support.home import REPO
from tests.support.otlp_streams import FIRST_S, MODEL

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def decisions(source: str) -> dict[str, dict]:
    """The decisions of one run of the script (one run per source, shared by the tests: each is a few seconds)."""
    return copy.deepcopy(_decisions(source))


@functools.cache
def _decisions(source: str) -> dict[str, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.otlp_streams", source],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert not [r for r in rows if "quarantined" in r], rows  # a cut stream is never quarantined
    return {r["session_id"].rsplit("-", 1)[1]: r for r in rows}


@pytest.mark.parametrize("source", ["openllmetry", "openai-v2", "openinference-openai"])
def test_a_stream_cut_midway_is_a_timeout_fallback_or_a_truncated_answer(source):
    """The device's stream drops after two chunks; the app then asks the cloud (`cut`), or serves what came
    (`partial`). OpenLLMetry marks the cut span OK without a finish reason, openai-v2 records the dropped
    connection as the error type, OpenInference records an error status and its response's model: each is a
    timeout, the cloud after it a timeout fallback, and the device model is the device call's own. OpenInference
    names no server, so its device is inferred from the trace's shape and the decision says so."""
    found = decisions(source)
    inferred = source.startswith("openinference")
    found["cut"].pop("ttft_ms"), found["cut"].pop("latency_ms")
    assert found["cut"] == {
        "session_id": f"{source}-cut",
        "fallback_type": "timeout",
        "reason": "device_timeout",
        "attempts": [[0, "timeout"], [2, "ok"]],
        "device_model": MODEL,
        "policy_version": "otlp-default+inferred" if inferred else "otlp-default",
    }
    if inferred:  # one call alone: nothing places it on the device, so it stays the cloud's, its outcome kept
        assert (found["partial"]["attempts"], found["partial"]["reason"]) == ([[2, "timeout"]], "default")
    else:
        assert (found["partial"]["fallback_type"], found["partial"]["reason"]) == ("none", "truncated")
        assert found["partial"]["attempts"] == [[0, "timeout"]]


@pytest.mark.parametrize("source", ["openllmetry", "openai-v2", "openinference-openai"])
def test_a_device_past_the_apps_timeout_is_a_timeout_fallback(source):
    """The device answers after the app's 0.5 s client timeout; the app asks the cloud. OpenLLMetry and openai-v2
    name the timeout in `error.type` (`APITimeoutError`), OpenInference only in its `exception` span event's
    `exception.type` (`openai.APITimeoutError`), which `collect` keeps: a timeout fallback, the device model the
    device call's own (the requested one, from OpenInference's request parameters: no answer came)."""
    slow = decisions(source)["slow"]
    assert (slow["fallback_type"], slow["reason"], slow["attempts"]) == (
        "timeout",
        "device_timeout",
        [[0, "timeout"], [2, "ok"]],
    )
    assert slow["device_model"] == "gemma-3-270m"


@pytest.mark.parametrize("source", ["openllmetry", "openai-v2", "openinference-openai"])
def test_time_to_first_token_comes_from_the_first_token_span_event(source):
    """The cloud's first chunk comes 0.4 s after the request, the rest 0.4 s later. OpenInference records a
    `First Token Stream Event` and OpenLLMetry a `gen_ai.content.completion.chunk` per chunk; `collect` keeps
    the first of each (its name and time only), and TTFT is its time less the call's start: at least the planted
    0.4 s, and short of the call's whole latency by about the second pause. openai-v2 2.4b0 records neither an
    event nor the attribute: TTFT stays null, never a guess."""
    paced = decisions(source)["paced"]
    if source == "openai-v2":
        assert paced["ttft_ms"] is None
        return
    first_ms = FIRST_S * 1000
    assert paced["ttft_ms"] >= first_ms, paced  # never before the first chunk was sent
    assert paced["latency_ms"] - paced["ttft_ms"] >= first_ms - 100, paced  # the first chunk, not the last
