"""The simulator (`routerscope.router.sim`): the fleet's simulated latencies, the bad threshold push as a `Policy`
object (no policy file), nothing read at import time, and the production router never importing it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from statistics import median

import pytest

from routerscope.contract.validation import DECISIONS
from routerscope.router.engine import L4_MS
from routerscope.router.policy import default_policy
from routerscope.router.sim.fleet import Fleet, Incidents, pushed_policy, simulated_policy
from tests.support.home import REPO, clean_env


def test_simulated_fleet_events_carry_their_simulated_latency():
    """The fleet's backends advance the router's clock: an event's latency_ms is its attempts' time (plus
    nothing: the router itself takes no simulated time), within its budget + 50 ms; not the wall time."""
    events = []
    fleet = Fleet(seed=3, start=datetime(2026, 11, 30, tzinfo=UTC), span=timedelta(minutes=10), on_event=events.append)
    fleet.run(1500)
    live = [e for e in events if e.mode == "live"]
    assert median(e.latency_ms for e in live) > 300  # was 0.02 ms of wall time
    for e in events:
        attempts_ms = sum(a.latency_ms for a in e.attempts)
        if e.mode == "live" or e.degrade_level < 2:
            assert e.latency_ms == pytest.approx(attempts_ms, abs=1e-6)
        else:  # docs/sources.md#seed-004 shadow: the user waited for the cloud's chain (the device's L0 ran beside
            # it), or, the cloud's breaker open when the request came, for the device on the user's path
            assert e.attempts[0].level >= 2 or e.entered_device
            cloud_ms = sum(a.latency_ms for a in e.attempts if a.level >= 2)
            assert min(abs(e.latency_ms - cloud_ms), abs(e.latency_ms - attempts_ms)) < 1e-6
        assert e.latency_ms <= e.deadline_ms - e.elapsed_ms + L4_MS
        assert DECISIONS.parse(e.to_json())[1] == []


def test_the_pushed_policy_is_the_simulated_one_with_one_stricter_threshold_and_its_own_version():
    base = simulated_policy()
    pushed = pushed_policy(base)
    assert base.shadow == {"code_snippet"} and pushed.shadow == base.shadow
    assert (base.capabilities["short_reply"].threshold, pushed.capabilities["short_reply"].threshold) == (0.60, 0.93)
    others = {k: v for k, v in pushed.capabilities.items() if k != "short_reply"}
    assert others == {k: v for k, v in base.capabilities.items() if k != "short_reply"}
    assert (pushed.breakers, pushed.rollout, pushed.cloud_prices) == (base.breakers, base.rollout, base.cloud_prices)
    label, _, digest = pushed.version.partition("+")
    assert label == "2026-11-30.1-pushed" and len(digest) == 8
    assert base.version.startswith("2026-11-30.1+") and base.version != default_policy().version
    # deriving never touches the shared default policy
    assert default_policy().capabilities["short_reply"].threshold == 0.60 and default_policy().shadow == frozenset()


def test_the_push_window_routes_every_request_with_the_pushed_policy_and_only_it():
    """The incident switches policy objects at the window's edges on the simulated clock: an event carries
    the pushed version exactly when its request started inside [75 %, 90 %) of the span (its start: the
    event's time less its latency), and the fleet writes no policy file."""
    events = []
    fleet = Fleet(seed=4, start=datetime(2026, 11, 30, tzinfo=UTC), span=timedelta(minutes=10), on_event=events.append)
    n = 400
    fleet.run(n)
    pushed, base = fleet.policy.pushed_to.version, fleet.policy.base.version
    assert len(events) == n
    start, span = datetime(2026, 11, 30, tzinfo=UTC), timedelta(minutes=10)
    for e in events:
        began = (e.event_time - timedelta(milliseconds=e.latency_ms) - start) / span
        assert e.policy_version == (pushed if Incidents.active(fleet.incidents.bad_threshold, began) else base), began
    assert fleet.policy.current().version == base  # rolled back at the end of the run


SCRIPT = r"""
import builtins, json, pathlib
reads = []
real_read_text, real_open = pathlib.Path.read_text, builtins.open
pathlib.Path.read_text = lambda self, *a, **k: reads.append(str(self)) or real_read_text(self, *a, **k)
builtins.open = lambda file, *a, **k: reads.append(str(file)) or real_open(file, *a, **k)
import routerscope.router.sim.backends, routerscope.router.sim.fleet, routerscope.router.sim.standin_cloud
import routerscope.router.sim.texts
at_import = list(reads)
from routerscope.router.policy import default_policy
from routerscope.router.sim.fleet import pushed_policy, simulated_policy
base = simulated_policy()
many = default_policy().with_("many", shadow=frozenset(["short_reply", "tool_call", "slot_extract", "code_snippet"]))
print(json.dumps({"at_import": at_import, "versions": [base.version, pushed_policy(base).version, many.version]}))
"""


def test_importing_the_simulator_reads_no_file_and_derived_versions_do_not_depend_on_the_hash_seed(tmp_path):
    outputs = []
    for seed in ("1", "2"):
        env = clean_env(tmp_path, PYTHONPATH=str(REPO), PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert outputs[0]["at_import"] == [] and outputs[1]["at_import"] == []
    assert outputs[0]["versions"] == outputs[1]["versions"]  # sets are hashed in a stable order


def test_the_production_router_never_imports_the_simulator():
    offenders = []
    for path in [
        *(REPO / "routerscope" / "router").glob("*.py"),
        *(REPO / "routerscope" / "instrumentation").glob("*.py"),
    ]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [
                f"{path.name}: {n}"
                for n in names
                if n == "routerscope.router.sim" or n.startswith("routerscope.router.sim.")
            ]
    assert offenders == []


def test_a_pii_request_over_the_devices_window_is_cut_to_it_and_never_reaches_the_cloud():
    """Measured before: a 9,000-token PII request (long_summary) entered the device whole, its peak memory
    9.2 GB on a 4 GB tier. Now its input is cut to the sim device's 2,048-token window at L1 (or it gets
    the canned answer): never the cloud, and the simulated KV cache is the cut input's."""
    events = []
    fleet = Fleet(seed=5, start=datetime(2026, 11, 30, tzinfo=UTC), span=timedelta(minutes=30), on_event=events.append)
    fleet.run(6000)
    long_pii = [e for e in events if e.has_pii and e.input_tokens == 9000]
    assert len(long_pii) >= 3
    for e in long_pii:
        assert e.cloud_calls == 0 and e.reason == "pii_pin" and e.mode == "live"
        assert [a.level for a in e.attempts][0] in (1, 4)
        if e.entered_device:
            assert e.device_stats.peak_mem_mb < 0.8 * 4096


def test_simulated_tiers_report_resident_memory_for_the_seed003_gate():
    """Contract v2 `device_stats.resident_mem_mb` (model loaded, idle): 850 MB plus half the tier's overhead
    (high 0, mid 60, low 140 MB), within 25 % of each tier's memory in the default policy."""
    events = []
    fleet = Fleet(seed=5, start=datetime(2026, 11, 30, tzinfo=UTC), span=timedelta(minutes=10), on_event=events.append)
    fleet.run(600)
    resident = {e.device_tier: e.device_stats.resident_mem_mb for e in events if e.device_stats is not None}
    assert resident == {"high": 850.0, "mid": 880.0, "low": 920.0}
    tiers = default_policy().device_tiers
    assert all(mb <= 0.25 * tiers[tier]["memory_mb"] for tier, mb in resident.items())


def test_simulated_time_never_runs_backwards_and_requests_overlap_into_device_busy():
    """Issue 27: measured before, the event clock ran backwards on 21 % of consecutive events and the fleet
    was sequential (0 `device_busy`). Now every decision and breaker event, in the order emitted, carries a
    time no earlier than the one before, and an app's follow-up call on a busy device goes to the cloud
    (docs/sources.md#seed-004-6: a hard cap, never a queue)."""
    events, breakers = [], []
    fleet = Fleet(
        seed=8,
        start=datetime(2026, 11, 30, tzinfo=UTC),
        span=timedelta(minutes=30),
        on_event=events.append,
        on_breaker_event=breakers.append,
    )
    fleet.run(5000)
    assert len(events) == 5000 and breakers
    for stream in (events, breakers):
        assert all(b.event_time >= a.event_time for a, b in zip(stream, stream[1:]))
    busy = [e for e in events if e.reason == "device_busy"]
    assert len(busy) >= 20 and all(not e.entered_device and e.degrade_level >= 2 for e in busy)


def test_device_ttft_is_load_plus_prefill_and_a_throttled_device_is_twice_as_slow():
    """docs/sources.md#seed-003: TTFT = fixed + input / prefill_tps (the model's load first on a cold start); a
    throttled SoC (the thermal episode) halves prefill and decode, so the same call takes about twice as long."""
    events = []
    fleet = Fleet(
        seed=9,
        start=datetime(2026, 11, 30, tzinfo=UTC),
        span=timedelta(minutes=60),
        incidents=Incidents(cloud_outage=(2.0, 2.0), thermal=(0.5, 1.0), bad_threshold=(2.0, 2.0)),
        on_event=events.append,
    )
    fleet.run(4000)
    fixed = {"high": 40.0, "mid": 60.0, "low": 100.0}
    device = [e for e in events if e.entered_device and e.ttft_ms is not None and e.device_stats.prefill_tps]
    for e in device:
        load = e.device_stats.load_ms or 0.0
        expected = fixed[e.device_tier] + load + e.input_tokens / e.device_stats.prefill_tps * 1000
        if e.attempts[0].level == 0:
            assert e.ttft_ms == pytest.approx(expected, rel=1e-6)
    low = [e for e in device if e.device_tier == "low" and not e.device_stats.cold_start and e.attempts[0].level == 0]
    cool = [e for e in low if e.device_stats.thermal_state in ("nominal", "fair")]
    hot = [e for e in low if e.device_stats.thermal_state in ("serious", "critical")]
    per_token = lambda es: median(e.ttft_ms / e.input_tokens for e in es)  # noqa: E731
    assert 1.7 < per_token(hot) / per_token(cool) < 2.4
    decode = lambda es: median(e.device_stats.decode_tps for e in es if e.device_stats.decode_tps)  # noqa: E731
    assert 1.7 < decode(cool) / decode(hot) < 2.4
