"""An incident named by its evidence (routerscope/warehouse/analytics/alerting/evidence.py, docs/runbook.md) and the
firing-now strip's words (routerscope/dashboards/now.py): pure, with hand-made evidence."""

from datetime import UTC, datetime, timedelta

from routerscope.dashboards.now import fired_for, lines
from routerscope.warehouse.analytics.alerting.evidence import Evidence, name

T0 = datetime(2026, 12, 7, 0, 45, tzinfo=UTC)


def evidence(during: dict, before: dict, **extra) -> Evidence:
    base = {
        "requests": 1000,
        "entered": 800,
        "fallbacks": 200,
        "timeouts": 10,
        "cloud_unavailable": 0,
        "canned": 5,
        "throttled": 20,
        "ttft_p90": 700.0,
    }
    return Evidence(
        during={**base, **during},
        before={**base, **before},
        baseline_start=T0 - timedelta(hours=1),
        start=T0,
        **extra,
    )


def test_the_thermal_episode_reads_device_slow_with_its_values_and_baseline():
    """Issue finding 4: the thermal episode could not be told apart ("thermal" appeared nowhere)."""
    ev = evidence(
        {"timeouts": 158, "throttled": 702, "ttft_p90": 2544.0},
        {"timeouts": 33, "throttled": 76},
        breaker_opened={"device": 3},
    )
    named = name("l2_l3_drift", ev)
    assert named.cause == "device slow (thermal?)"
    assert named.moved[0] == "device timeouts 15.8% of 1,000 requests (baseline 3.3%)"
    assert named.moved[1] == "requests on a throttled device 70.2% of 1,000 requests (baseline 7.6%)"
    assert "device time to first token p90 2,544 ms (baseline 700 ms)" in named.moved
    assert "device breaker opened 3 times" in named.moved
    assert named.explorer == {"reason": "device_timeout"} and named.runbook == "docs/runbook.md#device-slow-thermal"


def test_an_outage_reads_cloud_outage_and_links_to_the_canned_answers():
    ev = evidence({"canned": 300}, {"canned": 5}, breaker_opened={"cloud": 2})
    named = name("cloud_breaker_open", ev)
    assert named.cause == "cloud outage" and named.explorer == {"level": "4"}
    assert named.moved == [
        "canned answers (L4) 30.0% of 1,000 requests (baseline 0.5%)",
        "cloud breaker opened 2 times",
    ]
    assert "no rollback" in named.next_step


def test_both_in_one_episode_the_rule_decides():
    ev = evidence({"canned": 300, "timeouts": 200}, {}, breaker_opened={"cloud": 1})
    assert name("cloud_breaker_open", ev).cause == "cloud outage"
    assert name("l2_l3_drift", ev).cause == "device slow (thermal?)"


def test_a_push_inside_the_range_names_its_version_and_time_and_links_to_its_decisions():
    pushed = T0 - timedelta(minutes=10)
    ev = evidence(
        {"fallbacks": 690, "entered": 800},
        {"fallbacks": 310, "entered": 800},
        versions={"v1": T0 - timedelta(hours=1), "v1-pushed": pushed},
        reasons=[{"reason": "low_confidence", "during": 600, "before": 250}],
    )
    named = name("fallback_rate_high", ev)
    assert named.cause == "after push v1-pushed at 2026-12-07 00:35 UTC"
    assert named.moved == ["fallback rate 86.2% of 800 device-entered (baseline 38.8%)"]
    assert named.explorer == {"policy_version": "v1-pushed", "reason": "low_confidence"}


def test_no_cause_keeps_the_rule_words_and_the_reason_that_grew():
    ev = evidence(
        {},
        {},
        reasons=[
            {"reason": "validator_failed", "during": 90, "before": 10},
            {"reason": "low_confidence", "during": 100, "before": 100},
        ],
    )
    named = name("false_fallback_high", ev, "false fallbacks high")
    assert named.cause == "false fallbacks high" and named.explorer == {"reason": "validator_failed"}
    assert named.moved == ["fallbacks for validator failed 9.0% of 1,000 requests (baseline 1.0%)"]


def test_firing_durations_read_as_people_say_them_never_zero_minutes():
    assert [fired_for(s) for s in (0, 59, 60, 3599, 3600, 4500, 90000)] == [
        "under a minute",
        "under a minute",
        "1 min",
        "59 min",
        "1 h 00 min",
        "1 h 15 min",
        "1 d 1 h",
    ]


def test_the_strip_lists_pages_first_and_sends_a_data_quality_alert_to_its_check():
    now = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)
    firing = [
        {
            "alert_key": "ingest_stale|",
            "rule": "ingest_stale",
            "task_type": "",
            "severity": "ticket",
            "first_seen": now - timedelta(minutes=5),
        },
        {
            "alert_key": "data_quality_blocking|",
            "rule": "data_quality_blocking",
            "task_type": "",
            "severity": "page",
            "first_seen": now - timedelta(minutes=47),
        },
    ]
    out = lines(firing, now, ["labels.unique.label_id"])
    assert out[0].text.startswith("**PAGE** · blocking data-quality failure · `overall` · firing for **47 min**")
    assert "failing: labels.unique.label_id" in out[0].text
    assert (out[0].page, out[0].params) == ("app_pages/quality.py", {"check": "labels.unique.label_id"})
    assert out[1].page == "app_pages/oncall.py" and "ingest stale" in out[1].text


def test_machine_text_reads_as_words():
    """Finding 8: `$-0.0025`, "0.0973 days observed", `0.5 <= score < 0.75`, `error_cost_veto` on the pages."""
    from routerscope.dashboards import words

    assert words.money(-0.0025) == "−$0.0025" and words.money(1234.5, 2) == "$1,234.50" and words.money(None) == "—"
    assert words.span_of_days(0.0973) == "2.3 hours" and words.span_of_days(3.5) == "3.5 days"
    assert words.reason("0.5 <= score < 0.75") == "score from 0.5 to under 0.75"
    assert words.reason("score >= 0.75") == "score at or above 0.75"
    assert words.reason("error_cost_veto") == "vetoed by its error cost"
    assert words.rule_name("l2_l3_drift") == "L2+L3 share drifting"


def test_a_day_axis_ticks_once_a_day():
    """Finding 7: the tuning page's per-day axis labelled six ticks "2026-12-06" over two days."""
    import pandas as pd

    from routerscope.dashboards import charts

    frame = pd.DataFrame({"window_start": pd.to_datetime(["2026-12-06", "2026-12-07"], utc=True), "v": [0.1, 0.2]})
    spec = charts.line(frame, "window_start", "v", "rate").to_dict()
    assert spec["encoding"]["x"]["axis"]["tickCount"] == {"interval": "day", "step": 1}


def test_the_strip_says_what_fired_at_a_stale_evaluation_as_that_and_how_to_evaluate_now():
    """After the demo nothing evaluated the alerts: the strip said "Firing now: 1 (as of 22:44 UTC)" and "firing for
    5 h 29 min" of an episode last seen at 18:43. Three missed 5-minute evaluations make the last one stale."""
    from routerscope.dashboards.now import EVALUATION_STALE_S, heading

    now = datetime(2026, 12, 7, 22, 44, tzinfo=UTC)
    fresh, old = now - timedelta(minutes=4), datetime(2026, 12, 7, 18, 43, tzinfo=UTC)
    assert EVALUATION_STALE_S == 15 * 60
    assert heading(1, now, fresh) == ":red[●] **Firing now: 1** (as of 22:44 UTC, whatever the range)"
    assert heading(0, now, fresh).startswith(":green[●] Firing now: nothing (as of 22:44 UTC")
    assert heading(1, now, None).startswith(":red[●] **Firing now: 1**")  # never recorded: as before
    stale = heading(1, now, old)
    assert stale.startswith(":red[●] **Firing at the last alert evaluation: 1** (the alerts were last evaluated at")
    assert "2026-12-07 18:43 UTC, 4 h 01 min ago, and not since" in stale
    assert "`routerscope alerts --evaluate` evaluates them now" in stale
    assert heading(0, now, old).startswith(":orange[●] **Nothing fired at the last alert evaluation**")  # no all-clear
    assert heading(0, now, now - timedelta(minutes=15)).startswith(":green[●]")  # 15 min: still fresh
    # an evaluation stamped ahead of this clock (the warehouse's clock runs fast): not stale, durations to now
    ahead = now + timedelta(days=400)
    assert heading(1, now, ahead).startswith(":red[●] **Firing now: 1**")
    episode = {"alert_key": "l2_l3_drift|", "rule": "l2_l3_drift", "task_type": "", "severity": "ticket"}
    episode["first_seen"] = datetime(2026, 12, 7, 17, 15, tzinfo=UTC)
    (line,) = lines([episode], now, evaluated_at=old)
    assert "firing for **1 h 28 min** at the last evaluation (since 2026-12-07 17:15 UTC)" in line.text
    (line,) = lines([episode], now, evaluated_at=fresh)
    assert "firing for **5 h 29 min** (since 2026-12-07 17:15 UTC)" in line.text
