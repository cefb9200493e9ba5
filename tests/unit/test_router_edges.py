"""The router's edge paths (docs/router.md): every answer it serves is one it may serve. Each test plays one
probe of the seeds' own edge cases and asserts what the user receives and what the event records."""

from __future__ import annotations

import threading
import time

import pytest

from routerscope.contract.validation import DECISIONS
from routerscope.router.backends import CloudResult, DeviceResult, committed, complete_sentences, error_kind
from routerscope.router.engine import Request, Router
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore, write_policy
from routerscope.router.sim.backends import InstantDevice
from tests.support.fakes import FakeClock, GreedyCloud, GreedyDevice, QuickCloud


def policy_file(tmp_path, **edits: str) -> PolicyStore:
    text = DEFAULT_POLICY.read_text()
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "policy.yaml"
    write_policy(path, text)
    return PolicyStore(path, check_every_s=0.0)


def valid(event) -> None:
    assert DECISIONS.parse(event.to_json())[1] == []


class TokenStream:
    """Streams `tokens` on the fake clock, `per_token_ms` apart after `ttft_ms`, honouring the timeout, the commit
    point as the router asks for it (`commit_tokens`, `commit_on_sentence`) and its extension past it."""

    model, tps = "token-stream", 1000.0

    def __init__(self, clock: FakeClock, tokens: list[str], per_token_ms: float, ttft_ms: float = 10.0):
        self.clock, self.tokens, self.per_token, self.ttft_ms = clock, tokens, per_token_ms, ttft_ms
        self.asked: dict = {}

    def generate(
        self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens, commit_on_sentence=True, **kw
    ) -> DeviceResult:
        self.asked = dict(commit_tokens=commit_tokens, commit_on_sentence=commit_on_sentence, **kw)
        limit, extended = timeout_ms, kw.get("commit_timeout_ms") or timeout_ms
        started, out = self.clock.t, []
        for n, token in enumerate(self.tokens[:max_tokens], start=1):
            at = self.ttft_ms + (n - 1) * self.per_token
            if at > limit:
                self.clock.t = started + limit / 1000
                past = committed(len(out), "".join(out), commit_tokens, commit_on_sentence)
                return DeviceResult("".join(out), 0.95, "logprob", len(out), self.ttft_ms, limit, "timeout", past)
            out.append(token)
            if committed(n, "".join(out), commit_tokens, commit_on_sentence):
                limit = max(limit, extended)
        self.clock.t = started + (self.ttft_ms + (len(out) - 1) * self.per_token) / 1000
        return DeviceResult("".join(out), 0.95, "logprob", len(out), self.ttft_ms, 0.0, "ok")


# -- nothing unvalidated reaches a user ------------------------------------------------------------------------
SLOTS = ['{"city":', ' "St', ".", " Louis", '",', ' "day":', ' "Fri', "day", '"}']


def test_seed000_a_structured_answer_never_commits_on_a_sentence_end_and_is_never_served_cut(tmp_path):
    """docs/sources.md#seed-000: structured extraction must pass its schema check; a failure falls back. The
    device streams `{"city": "St. Louis", "day": "Fri` and slows down: the "." of "St." was a commit point, so the
    cut `{"city": "St. Louis", "day": "Fri…` was served as `truncated` with `fallback_type = none`. Now a structured
    task type has no commit point: past L0's share it falls back to the cloud."""
    clock = FakeClock()
    device = TokenStream(clock, SLOTS, per_token_ms=100.0)
    device.tokens = SLOTS[:7] + ["day"] * 40  # slows to a crawl after "Fri"
    store = policy_file(tmp_path, **{"slot_extract: {stage: canary, percent: 50}": "slot_extract: {stage: full}"})
    cloud = GreedyCloud(clock, need_ms=300, text='{"city": "St. Louis", "day": "Friday"}')
    router = Router(device, cloud, policy=store, clock=clock)
    response, event = router.route(
        Request(task_type="slot_extract", text="Book St. Louis on Friday", session_id="s", deadline_ms=3000)
    )
    valid(event)
    assert device.asked["commit_on_sentence"] is False and device.asked["commit_tokens"] > 64
    assert "commit_timeout_ms" not in device.asked  # no run past L0's share for a structured answer
    assert (response.served_by, response.text) == ("cloud", cloud.text)
    assert (event.fallback_type, event.reason) == ("timeout", "device_timeout")


def test_seed000_a_free_text_partial_answer_is_served_only_up_to_its_last_complete_sentence(tmp_path):
    clock = FakeClock()
    words = ["It", " rains", " today.", " Take", " an", " umbrella", " and", " boots"] + [" more"] * 200
    device = TokenStream(clock, words, per_token_ms=30.0)
    store = policy_file(tmp_path)
    router = Router(device, GreedyCloud(clock, need_ms=300), policy=store, clock=clock)
    response, event = router.route(Request(task_type="short_reply", text="Weather?", session_id="s", deadline_ms=3000))
    valid(event)
    assert (response.served_by, response.text, response.partial) == ("device", "It rains today.", True)
    assert (event.fallback_type, event.reason, event.degrade_level) == ("none", "truncated", 0)


@pytest.mark.parametrize(
    "text, expected",
    [("It rains. Take an umb", "It rains."), ("No end at all", ""), ("Done!", "Done!"), ("好的。然后", "好的。")],
)
def test_complete_sentences(text, expected):
    assert complete_sentences(text) == expected


@pytest.mark.parametrize(
    "answer, served_by",
    [
        ('{"city": "Paris", "day": "today"}', "device"),
        ('{"city": "Paris"}', "fallback"),  # the declared `day` missing: the schema check (was: served)
        ('{"city": "Par', "fallback"),
        ("banana", "fallback"),
    ],
)
def test_seed000_a_shadow_answer_served_while_the_cloud_is_open_passes_the_validator(tmp_path, answer, served_by):
    """A shadow task type with the cloud's breaker open is served by the device (docs/sources.md#seed-000: everything
    stays on the device): only a valid answer; an invalid one is the canned answer (was: served as it came)."""
    store = policy_file(tmp_path, **{"slot_extract: {stage: canary, percent: 50}": "slot_extract: {stage: shadow}"})
    device = InstantDevice(DeviceResult(answer, 0.99, "logprob", 5, 1.0, 2.0, "ok"))
    router = Router(device, QuickCloud(), policy=store)
    router.cloud_breaker.force_open("test")
    response, event = router.route(Request(task_type="slot_extract", text="to Paris", session_id="s"))
    valid(event)
    assert response.served_by == served_by and event.mode == "shadow"


# -- shadow never takes a live slot ------------------------------------------------------------------------------
class Yielding:
    """Real time: works `need_s` unless its `cancel` is set, then stops at once (as the real device does)."""

    model, ttft_ms, tps = "yielding-device", 1.0, 1e6
    honours_deadline = True

    def __init__(self, need_s: float):
        self.need_s, self.started, self.calls, self.cancelled = need_s, threading.Event(), [], 0

    def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens, cancel=None, **kw):
        self.calls.append(str(prompt))
        self.started.set()
        began = time.monotonic()
        limit = min(self.need_s, timeout_ms / 1000)
        while time.monotonic() - began < limit:
            if cancel is not None and cancel.is_set():
                self.cancelled += 1
                spent = (time.monotonic() - began) * 1000
                return DeviceResult("", None, "none", 0, spent, spent, "timeout")
            time.sleep(0.002)
        spent = (time.monotonic() - began) * 1000
        return DeviceResult("sure thing.", 0.95, "logprob", 3, 1.0, spent, "ok")


@pytest.mark.parametrize("pii", [True, False], ids=["pii request", "live request"])
def test_seed004_shadow_yields_the_device_to_a_live_request_at_once(tmp_path, pii):
    """docs/sources.md#seed-004-5 "端侧失败不影响主路径": `code_snippet` in shadow has its 2 s device run in flight
    (cap 1). Before, the next live request went to the cloud as `device_busy`, and a PII request got the canned
    answer (`pii_pin`, never entered). Now the shadow run yields: the live request enters the device at once and
    is served by it; the shadow's event records its device attempt cut short and no agreement."""
    device = Yielding(need_s=2.0)
    shadow_events = []
    router = Router(device, QuickCloud(), policy=policy_file(tmp_path))
    router.on_shadow_event = shadow_events.append

    def shadow() -> None:  # its event: returned, or sent when the device ends after the cloud served
        _, event = router.route(Request(task_type="code_snippet", text="def f(): pass", session_id="s1", files=1))
        if event is not None:
            shadow_events.append(event)

    threading.Thread(target=shadow, daemon=True).start()
    assert device.started.wait(5)
    device.need_s = 0.01  # the live request's own run is quick
    started = time.monotonic()
    response, event = router.route(Request(task_type="short_reply", text="hi", session_id="s2", has_pii=pii))
    waited = time.monotonic() - started
    valid(event)
    assert (response.served_by, event.entered_device) == ("device", True)
    assert event.reason == ("pii_pin" if pii else "default") and waited < 0.5
    assert device.cancelled == 1
    deadline = time.monotonic() + 5
    while not shadow_events and time.monotonic() < deadline:
        time.sleep(0.01)
    (shadow,) = shadow_events
    valid(shadow)
    assert shadow.mode == "shadow" and shadow.attempts[0].outcome == "timeout" and shadow.shadow_agree is None
    assert router.device_in_flight == 0 and router.shadow_in_flight == 0


def test_seed004_a_shadow_run_waits_for_a_device_live_traffic_does_not_use(tmp_path):
    """While a live request holds the device, a shadow request does not run its device at all (`device_busy`)."""
    device = Yielding(need_s=1.0)
    router = Router(device, QuickCloud("print(sum(range(11)))"), policy=policy_file(tmp_path))
    live = threading.Thread(
        target=lambda: router.route(Request(task_type="short_reply", text="hi", session_id="s2")), daemon=True
    )
    live.start()
    assert device.started.wait(5)
    response, event = router.route(Request(task_type="code_snippet", text="x", session_id="s1", files=1))
    valid(event)
    assert (response.served_by, event.entered_device, event.reason) == ("cloud", False, "device_busy")
    live.join(5)
    assert device.cancelled == 0


# -- policy reloads are whole or not at all -----------------------------------------------------------------------
def test_seed000_a_policy_written_in_slow_chunks_is_never_loaded_half(tmp_path):
    """docs/sources.md#seed-000: thresholds hot-reload. A writer (an editor, `kubectl cp`, a slow disk) rewrites
    the policy in 300-byte chunks 250 ms apart while traffic flows: before, a prefix that parsed was loaded and
    served `slot_extract` outside its 50 % canary and shadow `code_snippet` live from the device. Now every decision
    runs on the old policy or the whole new one."""
    path = tmp_path / "policy.yaml"
    old = DEFAULT_POLICY.read_text()
    write_policy(path, old)
    new = old.replace('version: "2026-11-30.1"', 'version: "2026-11-30.2"').replace(
        "threshold: 0.60", "threshold: 0.61"
    )
    store = PolicyStore(path, check_every_s=0.05, settle_s=0.5)  # in place: loads after 2 × 0.5 s unchanged
    device = InstantDevice(DeviceResult('{"city": "Paris"}', 0.99, "logprob", 5, 1.0, 2.0, "ok"))
    router = Router(device, QuickCloud(), policy=store)
    done = threading.Event()

    def writer() -> None:
        with open(path, "w") as f:
            for i in range(0, len(new), 300):
                f.write(new[i : i + 300])
                f.flush()
                time.sleep(0.25)
        done.set()

    threading.Thread(target=writer, daemon=True).start()
    events = []
    n, until = 0, None
    while until is None or time.monotonic() < until:
        if until is None and done.is_set():
            until = time.monotonic() + 1.5  # past the settle interval: the whole new file is read
        n += 1
        for task_type, kw in (("slot_extract", {}), ("code_snippet", {"files": 1})):
            _, event = router.route(Request(task_type=task_type, text="x", session_id=f"s{n}", **kw))
            if event is not None:
                events.append(event)
        time.sleep(0.02)
    versions = {e.policy_version.partition("+")[0] for e in events}
    assert versions == {"2026-11-30.1", "2026-11-30.2"}
    assert events[-1].policy_version.startswith("2026-11-30.2+")
    assert not [e for e in events if e.task_type == "code_snippet" and e.mode == "live"]
    assert not [e for e in events if e.task_type == "slot_extract" and e.rollout_stage != "canary" and e.entered_device]


def test_seed000_a_writer_pausing_longer_than_the_settle_interval_never_loads_half_a_policy(tmp_path):
    """A writer that paused 2.5 s mid-file (longer than the 1 s settle interval) got half a file loaded: a prefix
    that parses and holds every section, here one that drops `code_snippet`'s shadow stage. A file changed in
    place now loads only once it read the same at checks two settle intervals (2 s) apart; meanwhile the last good
    policy stays and `last_error` says why."""
    clock = FakeClock()
    path = tmp_path / "policy.yaml"
    old = DEFAULT_POLICY.read_text()
    write_policy(path, old)
    store = PolicyStore(path, check_every_s=0.0, clock=clock)
    rollout = old[old.index("rollout:") : old.index("rollout_limits:")]
    new = old.replace(rollout, "").replace('version: "2026-11-30.1"', 'version: "2026-11-30.2"') + rollout
    half = new[: new.index("  code_snippet: {stage: shadow}")]  # parses: every section is there
    from routerscope.router.policy import parse

    assert parse(half).stage("code_snippet").stage == "full"  # what loading the half would have done
    stages = []
    with open(path, "r+") as f:  # in place, as an editor that writes over the file does
        f.truncate(0)
        f.write(half)
        f.flush()
        for _ in range(5):  # the writer pauses 2.5 s
            stages.append(store.current().stage("code_snippet").stage)
            waiting = store.last_error
            clock.t += 0.5
        f.write(new[len(half) :])
    assert "changed in place" in waiting
    for _ in range(12):
        stages.append(store.current().stage("code_snippet").stage)
        clock.t += 0.5
    assert set(stages) == {"shadow"} and store.current().version.startswith("2026-11-30.2+")
    assert store.last_error is None


def test_a_policy_replaced_by_rename_loads_at_the_next_check(tmp_path):
    clock = FakeClock()
    path = tmp_path / "policy.yaml"
    write_policy(path, DEFAULT_POLICY.read_text())
    store = PolicyStore(path, check_every_s=0.0, clock=clock)
    write_policy(path, DEFAULT_POLICY.read_text().replace('version: "2026-11-30.1"', 'version: "2026-11-30.3"'))
    assert store.current().version.startswith("2026-11-30.3+") and store.last_error is None


def test_a_policy_without_a_section_the_last_one_had_is_not_loaded(tmp_path, caplog):
    clock = FakeClock()
    path = tmp_path / "policy.yaml"
    write_policy(path, DEFAULT_POLICY.read_text())
    store = PolicyStore(path, check_every_s=0.0, clock=clock, settle_s=0.0)
    before = store.current().version
    write_policy(path, DEFAULT_POLICY.read_text().split("rollout:")[0])  # parses, but the rest is missing
    with caplog.at_level("ERROR", logger="routerscope.router.policy"):
        assert store.current().version == before
    assert "incomplete, without breakers, breakers.cloud, breakers.device" in store.last_error
    assert "cloud_prices_usd_per_1k_tokens" in store.last_error and "keeping" in caplog.text


@pytest.mark.parametrize(
    "edit, message",
    [
        ("commit_tokens: abc", "commit_tokens must be an integer, not 'abc'"),
        ("commit_tokens: [1, 2]", "commit_tokens must be an integer"),
        ("commit_tokens: .inf", "commit_tokens must be an integer, not inf"),
        ("commit_tokens: 0", "commit_tokens must be at least 1"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_key_and_a_running_router_keeps_the_last_good(tmp_path, edit, message):
    clock = FakeClock()
    store = PolicyStore(policy_file(tmp_path).path, check_every_s=0.0, clock=clock, settle_s=0.0)
    router = Router(GreedyDevice(clock, need_ms=1), GreedyCloud(clock, need_ms=1), policy=store, clock=clock)
    good = store.current().version
    write_policy(store.path, store.path.read_text().replace("commit_tokens: 120", edit))
    _, event = router.route(Request(task_type="short_reply", text="x", session_id="s"))  # never fails a request
    assert event.policy_version == good and message in store.last_error and "\n" not in store.last_error


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(7))
            + "version: *h\ncapabilities: {}\n",
            "aliases expanded",
        ),
        ("version: 1\ncapabilities: {}\nx: " + "[" * 20_000 + "]" * 20_000 + "\n", "nested more than 16 levels deep"),
        ("version: " + "1" * 100_000 + "\ncapabilities: {}\n", "refused, a value it cannot read"),
    ],
    ids=["alias bomb", "deep nesting", "100,000-digit version"],
)
def test_hostile_yaml_is_refused_before_it_costs_memory(tmp_path, text, message):
    from routerscope.core.errors import ConfigError
    from routerscope.router.policy import parse

    with pytest.raises(ConfigError, match=message):
        parse(text, "p.yaml")


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory", "huge"])
def test_a_policy_path_that_is_not_a_small_regular_file_is_refused_at_once(tmp_path, kind):
    import os

    from routerscope.core.errors import ConfigError
    from routerscope.router.policy import read_policy_file

    path = tmp_path / "p.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path = "/dev/zero"
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_text("x" * (2 << 20))
    started = time.monotonic()
    with pytest.raises(ConfigError, match="not a regular file|a policy file holds at most"):
        read_policy_file(path)
    assert time.monotonic() - started < 1


# -- out of memory opens the device breaker -----------------------------------------------------------------------
class Raising:
    model, ttft_ms, tps = "raising-device", 1.0, 1e6

    def __init__(self, exc: BaseException, honours: bool):
        self.exc = exc
        self.honours_deadline = honours

    def generate(self, prompt, **kw):
        raise self.exc


@pytest.mark.parametrize("honours", [True, False], ids=["cooperating", "guarded"])
@pytest.mark.parametrize(
    "exc, opens",
    [
        (MemoryError(), True),
        (RuntimeError("llama_decode returned 1"), True),
        (RuntimeError("the model exploded"), False),
    ],
    ids=["MemoryError", "llama_decode returned 1", "other"],
)
def test_seed000_out_of_memory_is_recognised_and_opens_the_device_breaker(tmp_path, exc, opens, honours):
    """docs/sources.md#seed-000 "端侧 … 内存不足 … 时全量上云": a device raising MemoryError mid-stream, or llama.cpp's
    `llama_decode returned 1` (no KV-cache slot: its memory is full), was a generic `device_error` and the device
    breaker stayed closed."""
    router = Router(Raising(exc, honours), QuickCloud(), policy=policy_file(tmp_path))
    response, event = router.route(Request(task_type="short_reply", text="x", session_id="s", deadline_ms=2000))
    valid(event)
    assert (response.served_by, event.fallback_type, event.reason) == ("cloud", "error", "device_error")
    assert (router.device_breaker.state == "open") is opens
    assert error_kind(exc) == ("oom" if opens else None)


# -- p90 breaker on real latency shapes ---------------------------------------------------------------------------
class ShapedCloud:
    """Answers after `latency(t)` ms on the fake clock (t: seconds since the start)."""

    def __init__(self, clock: FakeClock, latency):
        self.clock, self.latency, self.t0 = clock, latency, clock.t

    def model_for(self, level):
        return {2: "cloud-small", 3: "cloud-large"}[level]

    def complete(self, prompt, *, level, max_tokens, timeout_ms):
        ms = self.latency(self.clock.t - self.t0)
        took = min(ms, timeout_ms)
        self.clock.t += took / 1000
        return CloudResult("cloud answer", took, "ok", 5) if ms <= timeout_ms else CloudResult("", took, "timeout")


def drive(tmp_path, latency, minutes: float, every_s: float = 5.0, task_type: str = "long_summary"):
    """Cloud-only requests (60 s budgets) every `every_s` seconds for `minutes`: the transitions and the events."""
    clock = FakeClock()
    seen = []
    router = Router(
        GreedyDevice(clock, need_ms=10),
        ShapedCloud(clock, latency),
        policy=policy_file(tmp_path),
        clock=clock,
        on_breaker_event=seen.append,
    )
    events = []
    end = clock.t + minutes * 60
    while clock.t < end:
        t = clock.t
        _, event = router.route(Request(task_type=task_type, text="x", session_id="s", deadline_ms=60_000))
        events.append((t - (end - minutes * 60), event))
        clock.t = max(clock.t, t + every_s)
    return router, [(e.to_state, e.trigger) for e in seen], events


def test_seed000_a_slow_ramp_is_caught_against_the_baseline_from_before_it(tmp_path):
    """docs/sources.md#seed-000 "P90 突增时全量走端侧": after two calm hours at 900 ms, a 30-minute ramp to 6 s. The
    30-minute baseline followed the ramp and never opened; the day's baseline (before the last hour) stays at
    900 ms, so the breaker opens once the 5-minute p90 passes 3 × 1000 ms (the floor)."""

    def ramp(t):
        return 900.0 if t < 7200 else min(6000.0, 900.0 + (t - 7200) / 1800 * 5100)

    router, transitions, events = drive(tmp_path, ramp, minutes=150)
    assert ("open", "cloud_p90_spike") in transitions
    opened = next(t for t, e in events if e.breaker.cloud == "open")
    assert 7200 < opened < 7200 + 1800


def test_seed000_a_permanent_shift_settles_and_cloud_only_traffic_keeps_the_cloud(tmp_path):
    """A permanent step 900 → 4000 ms: the breaker opens on the spike, then half-open trials answer at the new
    level for `p90_settle_s` (30 minutes: longer than a surge lasts) and the baseline moves to it: closed again
    after about half an hour (was: blocked 37 minutes; settling within minutes made a 20-minute surge look like
    a shift). Meanwhile no cloud-only request gets the canned answer: the cloud answers in 4 s of their 60 s."""

    def step(t):
        return 900.0 if t < 3600 else 4000.0

    router, transitions, events = drive(tmp_path, step, minutes=120)
    assert transitions[0] == ("open", "cloud_p90_spike")
    assert ("closed", "trial_succeeded") in transitions
    after = [e for t, e in events if t > 3600]
    assert not [e for e in after if e.degrade_level == 4]
    closed_at = next(t for t, e in events if t > 3600 and e.breaker.cloud == "closed" and t > 3700)
    assert 30 * 60 <= closed_at - 3600 < 35 * 60
    assert transitions.count(("open", "cloud_p90_spike")) == 1  # settled for good: no reopening at 4 s
    assert router.cloud_baseline_ms() == pytest.approx(4000.0)


def test_seed000_normal_cloud_latencies_never_open_a_fresh_routers_breaker(tmp_path):
    """Seed 000's normal cloud latencies (1.2 / 1.6 / 2.8 s by output length) with the shipped floor: a fresh router
    that has not learned its cloud yet read them as a spike (3 openings in its first hour at the old 800 ms)."""
    cycle = (1200.0, 1600.0, 2800.0)
    calls = [0]

    def seed_latencies(t):
        calls[0] += 1
        return cycle[calls[0] % 3]

    _, transitions, events = drive(tmp_path, seed_latencies, minutes=60, every_s=2.0)
    assert transitions == [] and not [e for _, e in events if e.degrade_level == 4]


# -- the event keeps the deadline the gateway sent --------------------------------------------------------------
@pytest.mark.parametrize("sent", [0, -500])
def test_a_budget_already_gone_is_served_canned_and_the_event_keeps_what_the_gateway_sent(tmp_path, sent):
    """Served right (the canned answer at once), but the event read `deadline_ms = 1`, not what the gateway sent:
    contract v2's optional `gateway_deadline_ms` keeps it (docs/contract.md); `deadline_ms` stays a valid 1."""
    router = Router(GreedyDevice(FakeClock(), need_ms=1), QuickCloud(), policy=policy_file(tmp_path))
    response, event = router.route(Request(task_type="short_reply", text="x", session_id="s", deadline_ms=sent))
    valid(event)
    assert response.served_by == "fallback" and [a.level for a in event.attempts] == [4]
    assert (event.deadline_ms, event.gateway_deadline_ms) == (1, sent)
    _, normal = router.route(Request(task_type="short_reply", text="x", session_id="s", deadline_ms=8000))
    assert b"gateway_deadline_ms" not in normal.to_json()


def test_gateway_deadline_is_v2_only_and_bounded():
    import json

    from tests.support.events import decision

    v2 = decision(schema_version=2)
    assert DECISIONS.parse(json.dumps(v2 | {"gateway_deadline_ms": -500}).encode())[1] == []
    v1 = decision() | {"gateway_deadline_ms": -500}
    assert "schema.unknown.gateway_deadline_ms" in DECISIONS.parse(json.dumps(v1).encode())[1]
    positive = v2 | {"gateway_deadline_ms": 5}  # a positive deadline belongs in deadline_ms
    assert DECISIONS.parse(json.dumps(positive).encode())[1] == ["schema.invalid.gateway_deadline_ms"]


# -- hostile backends and inputs (a hostile tester's findings, each now held) -------------------------------------
class Capped:
    """Streams exactly the output cap it is given, on the fake clock; its estimates say it is slow."""

    model, ttft_ms, tps = "capped", 150.0, 5.0

    def __init__(self, clock: FakeClock, text: str):
        self.clock, self.text, self.caps = clock, text, []

    def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens, **kw):
        self.caps.append(max_tokens)
        self.clock.t += 0.01
        return DeviceResult(self.text[: max_tokens * 3], 0.99, "logprob", max_tokens, 5.0, 10.0, "ok")


@pytest.mark.parametrize(
    "task_type, text", [("intent_classify", "set_alarm"), ("short_reply", "Fine thanks. And you, how is it")]
)
def test_an_answer_that_reaches_a_lowered_cap_is_cut_and_a_structured_one_is_never_served(tmp_path, task_type, text):
    """With the cloud's breaker open and the device slow, the output cap is lowered; an answer that used all of
    it may be cut. A label prefix (`set_al`) passed the label validator and was served whole; now a structured
    answer that reached the cap falls back, and free text is served up to its last complete sentence."""
    clock = FakeClock()
    device = Capped(clock, text)
    router = Router(device, GreedyCloud(clock), policy=policy_file(tmp_path), clock=clock)
    router.cloud_breaker.force_open("test")
    response, event = router.route(
        Request(task_type=task_type, text="x", session_id="s", deadline_ms=2000, expected_output_tokens=16)
    )
    valid(event)
    assert device.caps and device.caps[0] < 16 and event.reason == "truncated"
    if task_type == "intent_classify":
        assert response.served_by == "fallback" and event.fallback_type == "timeout"
    else:
        assert (response.served_by, response.text, response.partial) == ("device", "Fine thanks.", True)


def test_seed004_shadow_runs_that_yield_never_open_the_device_breaker(tmp_path):
    """A shadow run that yields to live traffic ends as a timeout; counted by the device breaker, five yields
    opened it and live traffic went to the cloud. Shadow outcomes never reach the breaker."""
    device = Yielding(need_s=0.5)
    router = Router(device, QuickCloud(), policy=policy_file(tmp_path))
    for i in range(12):
        deadline = time.monotonic() + 5
        while (router.shadow_in_flight or router.device_in_flight) and time.monotonic() < deadline:
            time.sleep(0.005)  # the last shadow run has given its slot back
        device.started.clear()
        device.need_s = 0.5
        t = threading.Thread(
            target=router.route,
            args=(Request(task_type="code_snippet", text="x", session_id=f"a{i}", files=1),),
            daemon=True,
        )
        t.start()
        assert device.started.wait(5)
        device.need_s = 0.001
        _, event = router.route(Request(task_type="short_reply", text="hi", session_id=f"b{i}"))
        assert event.entered_device and event.reason == "default"
        t.join(5)
    assert device.cancelled == 12 and router.device_breaker.state == "closed"


def test_a_device_taking_any_keyword_is_never_handed_a_cancel(tmp_path):
    """The model worker forwards `**kwargs` over its pipe as JSON: handed a `Cancel`, every shadow run failed to
    serialise. Only a backend that names `cancel` gets one."""
    import json as _json

    seen = []

    class Forwarding:
        model, ttft_ms, tps = "forwarding", 1.0, 1e6
        honours_deadline = True

        def generate(self, prompt, **kwargs):
            seen.append(_json.dumps({k: v for k, v in kwargs.items() if k != "decide"}))
            return DeviceResult("def f(): pass", 0.9, "logprob", 3, 1.0, 1.0, "ok")

    edits = {"device_concurrency: 1 ": "device_concurrency: 2 "}
    router = Router(Forwarding(), QuickCloud(), policy=policy_file(tmp_path, **edits))
    _, event = router.route(Request(task_type="code_snippet", text="x", session_id="s", files=1))
    assert seen and event.attempts[0].outcome == "ok" and event.mode == "shadow"


def test_seed004_a_device_that_cannot_yield_runs_no_shadow_in_the_only_slot(tmp_path):
    """A device without `cancel` cannot give the device back: with `device_concurrency: 1` a shadow run would make
    the next PII request wait or get the canned answer, so it runs no shadow at all (`device_busy`)."""

    class Serial:
        model, ttft_ms, tps = "serial", 1.0, 1e6
        honours_deadline = True

        def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens):
            return DeviceResult("ok.", 0.99, "logprob", 1, 1.0, 1.0, "ok")

    router = Router(Serial(), QuickCloud(), policy=policy_file(tmp_path))
    _, event = router.route(Request(task_type="code_snippet", text="x", session_id="s", files=1))
    assert (event.mode, event.entered_device, event.reason) == ("shadow", False, "device_busy")


def test_a_breaker_sink_that_raises_never_fails_a_request_nor_frees_a_slot_twice(tmp_path):
    class Hanging:
        model, ttft_ms, tps = "hanging", 1.0, 1e6

        def __init__(self):
            self.release = threading.Event()

        def generate(self, prompt, **kw):
            self.release.wait(5)
            return DeviceResult("x.", 0.9, "logprob", 1, 1.0, 1.0, "ok")

    def sink(event):
        raise RuntimeError("the breaker topic is gone")

    device = Hanging()
    router = Router(device, QuickCloud(), policy=policy_file(tmp_path), on_breaker_event=sink)
    try:
        # a budget the cloud meets after the device's abandoned L0 also on a loaded machine (300 ms was not always)
        response, event = router.route(Request(task_type="short_reply", text="x", session_id="s", deadline_ms=1500))
        valid(event)
        assert response.served_by == "cloud" and router.device_breaker.state == "open"
    finally:
        device.release.set()
    deadline = time.monotonic() + 5
    while router.device_in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert router.device_in_flight == 0


@pytest.mark.parametrize(
    "request_kw",
    [
        dict(deadline_ms=float("nan")),
        dict(deadline_ms=float("inf")),
        dict(elapsed_ms=float("nan")),
        dict(deadline_ms=10**12),
        dict(elapsed_ms=10**12),
        dict(deadline_ms=-(10**12)),
        dict(task_type="tool_call", tools=5),
        dict(task_type="tool_call", tools=(["lookup"],)),
        dict(task_type="tool_call", tools=(t for t in ["delete_all_files"])),
        dict(task_type="code_snippet", files="1"),
        dict(task_type="code_snippet", files=0.5),
        dict(input_tokens=-3),
    ],
    ids=lambda kw: ",".join(f"{k}={v!r}"[:40] for k, v in kw.items()),
)
def test_route_never_raises_on_hostile_request_values_and_every_event_is_valid(tmp_path, request_kw):
    device = InstantDevice(DeviceResult('{"tool": "lookup"}', 0.99, "logprob", 3, 1.0, 2.0, "ok"))
    router = Router(device, QuickCloud(), policy=policy_file(tmp_path))
    kw = dict(task_type="short_reply", text="x", session_id="s") | request_kw
    response, event = router.route(Request(**kw))
    valid(event)
    if kw["task_type"] in ("tool_call", "code_snippet"):
        assert not event.entered_device and event.reason in ("capability_miss", "policy_cloud")


@pytest.mark.parametrize(
    "result",
    [
        DeviceResult(None, 0.9, "logprob", 3, 1.0, 2.0, "ok"),
        DeviceResult("x.", "high", "logprob", 3, 1.0, 2.0, "ok"),
        DeviceResult("x.", float("nan"), "logprob", 3, 1.0, 2.0, "ok"),
        DeviceResult("x.", 0.9, "logprob", None, 1.0, 2.0, "ok"),
        DeviceResult("x.", 0.9, "logprob", -1, -5.0, 2.0, "ok"),
        DeviceResult("x.", 0.9, "logprob", 3, 1.0, 2.0, "maybe"),
        DeviceResult("x.", 0.9, "logprob", 3, 1.0, 2.0, "ok", stats={"peak_mem_mb": "lots", "thermal_state": "hot"}),
        "not a result",
    ],
    ids=["text None", "confidence text", "confidence NaN", "tokens None", "negatives", "outcome", "stats", "str"],
)
def test_route_never_raises_on_what_a_hostile_device_returns(tmp_path, result):
    device = InstantDevice(result)
    router = Router(device, QuickCloud(), policy=policy_file(tmp_path))
    response, event = router.route(Request(task_type="short_reply", text="x", session_id="s"))
    valid(event)
    if result is not None and getattr(result, "confidence", None) != 0.9:
        assert response.served_by != "device"  # an unreadable confidence never passes a threshold


def test_the_days_baseline_survives_a_quiet_hour(tmp_path):
    """A cloud steady at 4 s for three hours has a 4 s baseline; after an idle hour the short horizon is empty, and
    the baseline fell to the 1 s floor: the same 4 s then opened the breaker."""

    def steady(t):
        return 4000.0 if t < 3 * 3600 or t > 4 * 3600 else None

    clock = FakeClock()
    router = Router(
        GreedyDevice(clock, need_ms=10), ShapedCloud(clock, lambda t: 4000.0), policy=policy_file(tmp_path), clock=clock
    )
    end = clock.t + 3 * 3600
    while clock.t < end:
        t = clock.t
        router.route(Request(task_type="long_summary", text="x", session_id="s", deadline_ms=60_000))
        clock.t = max(clock.t, t + 10)
    clock.t += 3600  # an idle hour
    assert router.cloud_baseline_ms() == pytest.approx(4000.0)


def test_a_request_with_nowhere_else_to_go_tries_l3_when_l2_cannot_hold_the_slow_cloud(tmp_path):
    clock = FakeClock()
    router = Router(
        GreedyDevice(clock, need_ms=10), ShapedCloud(clock, lambda t: 6000.0), policy=policy_file(tmp_path), clock=clock
    )
    for _ in range(20):
        router.cloud_latency.add(6000.0)
    router.cloud_breaker.force_open("cloud_p90_spike")
    response, event = router.route(Request(task_type="long_summary", text="x", session_id="s", deadline_ms=8000))
    valid(event)
    assert response.served_by == "cloud" and [a.level for a in event.attempts] == [3]


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("max_output_tokens: 16, ", "max_output_tokens: -16, ", "max_input_tokens and max_output_tokens must be >= 0"),
        ("cooldown_s: 30,\n           p90", "cooldown_s: .inf,\n           p90", "cooldown_s must be a number"),
        ("p90_spike_factor: 3.0", "p90_spike_factor: 1.0e-300", "a value is out of range"),
        ("device_concurrency: 1 ", "device_concurrency: " + "9" * 4000 + " ", "device_concurrency must be"),
        ("validator: label,", "validator: regex, pattern: '(',", "pattern is no regular expression"),
        ("pii_to_cloud: false", "pii_to_cloud: false\npii_to_cloud: true", "appears twice"),
    ],
    ids=["negative cap", "infinite cool-down", "tiny spike factor", "huge int", "bad regex", "duplicate key"],
)
def test_a_policy_value_out_of_its_type_or_range_is_one_line(tmp_path, old, new, expected):
    from routerscope.core.errors import ConfigError
    from routerscope.router.policy import parse

    text = DEFAULT_POLICY.read_text()
    assert old in text
    with pytest.raises(ConfigError, match=expected):
        parse(text.replace(old, new, 1), "p.yaml")


def test_a_policy_rewritten_with_the_same_content_again_and_again_still_loads_a_change(tmp_path):
    """An agent that rewrites the file every half second kept resetting the settle interval: a real change waited
    8 s. The settle interval is on the content, so identical rewrites neither delay nor reload it."""
    clock = FakeClock()
    path = tmp_path / "policy.yaml"
    write_policy(path, DEFAULT_POLICY.read_text())
    store = PolicyStore(path, check_every_s=0.0, clock=clock, settle_s=1.0)
    new = DEFAULT_POLICY.read_text().replace('version: "2026-11-30.1"', 'version: "2026-11-30.9"')
    for _ in range(6):
        write_policy(path, new)
        store.current()
        clock.t += 0.5
    assert store.current().version.startswith("2026-11-30.9+")


def test_an_edit_that_keeps_size_and_modification_time_is_still_seen(tmp_path):
    import os

    clock = FakeClock()
    path = tmp_path / "policy.yaml"
    write_policy(path, DEFAULT_POLICY.read_text())
    store = PolicyStore(path, check_every_s=0.0, clock=clock, settle_s=0.0)
    st = path.stat()
    path.write_text(DEFAULT_POLICY.read_text().replace("threshold: 0.60", "threshold: 0.61"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert store.current().capability("short_reply").threshold == 0.61


def test_a_document_that_is_no_policy_is_refused_for_what_it_is(tmp_path):
    clock = FakeClock()
    path = tmp_path / "policy.yaml"
    write_policy(path, DEFAULT_POLICY.read_text())
    store = PolicyStore(path, check_every_s=0.0, clock=clock, settle_s=0.0)
    write_policy(path, "- just\n- a list\n")
    store.current()
    assert "expected a mapping with `version`" in store.last_error


def test_pii_with_twenty_thousand_turns_is_cut_within_its_budget(tmp_path):
    """Cutting a long chat dropped one turn at a time and re-summed every message: 20,000 turns took 7.8 s on a
    600 ms budget. The cut is linear now."""
    messages = [{"role": "system", "content": "Be brief."}] + [
        {"role": "user" if i % 2 else "assistant", "content": f"turn {i} about my card 4111"} for i in range(20_000)
    ]
    router = Router(InstantDevice(DeviceResult("Sure.", 0.99, "logprob", 2, 1.0, 2.0, "ok")), QuickCloud())
    started = time.monotonic()
    response, event = router.route(
        Request(task_type="short_reply", text="", session_id="s", messages=messages, has_pii=True, deadline_ms=600)
    )
    assert (time.monotonic() - started) * 1000 <= 650 and event.degrade_level == 1 and response.served_by == "device"


def test_a_cut_plain_text_keeps_its_head_and_its_question():
    from routerscope.router.backends import CUT_MARK, degrade_prompt

    text = "Summarise: " + "blah " * 2000 + "QUESTION: is my card blocked?"
    cut = degrade_prompt(text, 0.1)
    assert len(cut) <= len(text) * 0.1 and cut.startswith("Summarise: ") and cut.endswith("is my card blocked?")
    assert CUT_MARK in cut


def test_a_megabyte_of_pii_is_never_tokenized_whole_on_the_requests_thread(tmp_path):
    """Gemma's tokenizer takes ≈ 0.5 s a megabyte: a 1.5 MB PII text held a 600 ms budget for 782 ms. Past
    MAX_COUNTED_CHARS the text is first cut by characters, and only what is left is counted."""
    from routerscope.router.engine import MAX_COUNTED_CHARS

    counted = []

    class Counting:
        model, ttft_ms, tps, context_tokens = "counting", 1.0, 1e6, 2048
        honours_deadline = True

        def count_tokens(self, text):
            counted.append(len(text))
            return len(text) // 3

        def generate(self, prompt, **kw):
            return DeviceResult("Noted.", 0.99, "logprob", 2, 1.0, 2.0, "ok")

    router = Router(Counting(), QuickCloud(), policy=policy_file(tmp_path))
    text = "my card 4111 1111 1111 1111 " * 55_000  # ≈ 1.5 MB
    response, event = router.route(
        Request(task_type="short_reply", text=text, session_id="s", has_pii=True, deadline_ms=600)
    )
    valid(event)
    assert counted and max(counted) <= MAX_COUNTED_CHARS
    assert (response.served_by, event.degrade_level, event.reason) == ("device", 1, "pii_pin")


def test_seed000_a_fresh_router_catches_a_ramp_against_the_policys_ceiling(tmp_path):
    """A freshly started router and a 900 → 6,000 ms ramp over 30 minutes: the 30-minute baseline followed the
    ramp and the breaker never opened (0 openings in 80 minutes). Without a day's baseline the threshold is capped
    at 3 × `p90_baseline_ms` (1000 ms): it opens once the 5-minute p90 passes 3 s."""

    def ramp(t):
        return min(6000.0, 900.0 + t / 1800 * 5100)

    router, transitions, events = drive(tmp_path, ramp, minutes=80)
    assert ("open", "cloud_p90_spike") in transitions
    opened = next(t for t, e in events if e.breaker.cloud == "open")
    assert opened < 1800


def test_seed000_every_surge_opens_the_breaker_for_as_long_as_it_lasts(tmp_path):
    """With a day of history at 900 ms, two 20-minute surges to 6 s an hour apart: the first kept traffic off the
    cloud for 2.9 minutes only (three slow trials settled the baseline on the surge), and the second never
    opened the breaker. A surge shorter than `p90_settle_s` never moves the baseline: each opens it, and it
    stays open (trials failing at the surge's latency) until the surge ends."""
    surges = [(26 * 3600, 26 * 3600 + 1200), (27.5 * 3600, 27.5 * 3600 + 1200)]

    def shape(t):
        return 6000.0 if any(a <= t < b for a, b in surges) else 900.0

    router, transitions, events = drive(tmp_path, shape, minutes=29 * 60, every_s=10.0)
    opened_in = []
    for a, b in surges:
        inside = [e.breaker.cloud for t, e in events if a + 300 <= t < b]
        opened_in.append(sum(s != "closed" for s in inside) / len(inside))
    assert all(share > 0.8 for share in opened_in), opened_in
    assert router.cloud_baseline_ms() < 1500  # the day's baseline, never the surge's level


class IgnoresCancel(Yielding):
    """Takes the keyword `cancel` and never looks at it: works its `need_s` whatever happens."""

    def __init__(self, need_s: float):
        super().__init__(need_s)
        self.running, self.peak = 0, 0
        self._lock = threading.Lock()

    def generate(self, prompt, *, max_tokens, timeout_ms, degraded, commit_tokens, cancel=None, **kw):
        with self._lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            return super().generate(
                prompt,
                max_tokens=max_tokens,
                timeout_ms=timeout_ms,
                degraded=degraded,
                commit_tokens=commit_tokens,
                cancel=None,
            )
        finally:
            with self._lock:
                self.running -= 1


def test_seed004_an_ignored_cancel_still_counts_against_the_cap(tmp_path):
    """docs/sources.md#seed-004-6: the concurrency cap is hard. A backend that accepts `cancel` but ignores it left
    2 calls at once on a cap-1 device for about 2 s (the live request entered, trusting the shadow run to yield).
    Now a live request waits at most 250 ms for the yield; a run that did not yield still holds the device, and
    the live request goes to the cloud (`device_busy`)."""
    device = IgnoresCancel(need_s=1.0)
    router = Router(device, QuickCloud(), policy=policy_file(tmp_path))
    shadow = threading.Thread(
        target=lambda: router.route(Request(task_type="code_snippet", text="x", session_id="s1", files=1)),
        daemon=True,
    )
    shadow.start()
    assert device.started.wait(5)
    started = time.monotonic()
    responses = [router.route(Request(task_type="short_reply", text="hi", session_id=f"s{i}")) for i in range(3)]
    assert time.monotonic() - started < 1.0  # the first waits the 250 ms; the next two see the ignored cancel at once
    for response, event in responses:
        valid(event)
        assert (response.served_by, event.reason, event.entered_device) == ("cloud", "device_busy", False)
    shadow.join(5)
    assert device.peak == 1 and router.device_in_flight == 0
