"""On-call sees "now" in a second: what fires is on every page whatever the range, a blocking data-quality failure
is an incident whose link opens the failing check, incidents are named by their evidence and link to the decisions
behind it, a recommendation never walks into an alert, and `alerts --json` reads the rollback verdicts
`report rollout` reads. Real pages in Debian's chromium (Playwright) where a person would look, against a real
embedded warehouse holding the golden fixture."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import pytest

from routerscope.warehouse.analytics import alerting, quality
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.queries.alerts import write_alerts
from routerscope.warehouse.sql import QueryWindow
from tests.integration.test_dashboards import FIXTURE_DAY, _episode, fill, render
from tests.support.events import label
from tests.support.golden_day import END, START, insert
from tests.support.home import ROUTERSCOPE, clean_env, copy_warehouse

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # real browsers, CLI processes, AppTest runs


@pytest.fixture
def populated(home, monkeypatch, warehouse_template):
    settings = copy_warehouse(warehouse_template("dashboards", fill), home)
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(home))
    for name in [k for k in list(__import__("os").environ) if k.startswith("ROUTERSCOPE_") and k != "ROUTERSCOPE_HOME"]:
        monkeypatch.delenv(name)
    from routerscope.dashboards import data

    data.clear_caches()
    return settings


def _now() -> datetime:
    return datetime.now(UTC).replace(second=0, microsecond=0)


def _firing_page_alert(settings, minutes_ago: int, evaluated_minutes_ago: int = 0) -> None:
    """A PAGE alert firing since `minutes_ago`, long after the fixture's data (as the demo's 01:13 ones were), as the
    alerts job left it at its evaluation `evaluated_minutes_ago` (recorded: the fixture's own is as old as the run)."""
    now = _now()
    seen = now - timedelta(minutes=evaluated_minutes_ago)
    row = _episode("fallback_rate_high", "intent_classify", now - timedelta(minutes=minutes_ago), seen, "firing")
    row[4] = "page"
    with open_warehouse(settings) as client:
        write_alerts(client, [row])
        # the fixture's evaluation (its rules) as the only one, made at `seen`
        rules = client.query(
            "SELECT rules_path, rule_version, rules_sha256 FROM routerscope.alert_evaluations "
            "ORDER BY evaluated_at DESC LIMIT 1"
        ).result_rows[0]
        client.command("TRUNCATE TABLE routerscope.alert_evaluations")
        client.insert(
            "routerscope.alert_evaluations",
            [[seen, seen, *rules, "test"]],
            column_names=["evaluated_at", "as_of", "rules_path", "rule_version", "rules_sha256", "by"],
        )


def _reused_label_ids(settings) -> None:
    """Finding 1: a re-run reused label ids for other requests; the blocking `labels.unique.label_id` check fails
    and the alerts run after the daily suites (as the demo and the daemon do now)."""
    reused = "00000000-0000-4000-8000-0000000000aa"
    at = (START + timedelta(hours=3)).isoformat().replace("+00:00", "Z")
    with open_warehouse(settings) as client:
        insert(client, [], [label(label_id=reused, request_id=r, event_time=at) for r in ("a1", "a2")])
        quality.store(client, quality.run_suites(client, QueryWindow(START, END), now=END))
        alerting.run(client)


@pytest.mark.timeout(300)
def test_a_firing_alert_is_on_every_page_whatever_the_range_with_how_long_it_fired(populated, home):
    """Finding 2: presets ended at the newest data, so two PAGE alerts firing after it lay outside every preset, the
    top banner was a resolved rollback and the firing rows read "(0 min)". Now a strip under the range selector
    lists what fires on every page, with how long, and presets end now."""
    from tests.support.browser import browser_page, dashboard, open_when_up, wait_idle

    _firing_page_alert(populated, minutes_ago=75)
    with dashboard(home) as base, browser_page() as page:
        for path, query in (("", FIXTURE_DAY), ("tuning", {"range": "1h"}), ("explorer", {"range": "7d"})):
            open_when_up(page, f"{base}/{path}?{urlencode(query)}")
            page.get_by_text("Firing now:").first.wait_for(timeout=60_000)
            wait_idle(page)
            text = page.locator('[data-testid="stMain"]').inner_text()
            strip = text[text.index("Firing now:") :]
            line = next(x for x in strip.splitlines() if "fallback rate high" in x)  # (the fixture's ingest_stale too)
            assert line.startswith("PAGE") and "intent_classify" in line, line
            assert re.search(r"firing for 1 h 1\d min \(since ", line), line  # 75 minutes and the test's own
        # the preset ends now: the caption of "last 1 h" ends within a minute or two of the wall clock
        open_when_up(page, f"{base}/?range=1h")
        page.get_by_text("Firing now:").first.wait_for(timeout=60_000)
        wait_idle(page)
        caption = page.get_by_text("last 1 h:").first.inner_text()
        end = datetime.strptime(caption.split("–")[1].strip()[:16], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
        assert abs((end - _now()).total_seconds()) <= 180, caption
        body = page.locator('[data-testid="stMain"]').inner_text()
        assert "(0 min)" not in body
        assert "firing for 1 h 1" in body  # the incident row says how long too, not "(0 min)"
        assert page.locator('[data-testid="stException"]').count() == 0


def test_an_alert_the_pipeline_stopped_evaluating_is_not_said_to_fire_now(populated):
    """After the demo, nothing evaluated the alerts any more: On-call said "Firing now: 1 (as of 22:44 UTC)" and "firing
    for 5 h 29 min" of a drift last seen at 18:43. What fired at the last evaluation is said as that, with its time,
    how long ago, and how to evaluate now; how long it fired runs to that evaluation."""
    _firing_page_alert(populated, minutes_ago=300, evaluated_minutes_ago=240)
    app = render("oncall.py", **FIXTURE_DAY)
    text = "\n".join(str(getattr(e, "value", "")) for e in app.main)
    assert "Firing now:" not in text
    assert re.search(r"\*\*Firing at the last alert evaluation: \d\*\*", text), text  # (the fixture's ingest_stale too)
    assert re.search(r"4 h 0\d min ago, and not since", text)  # (a minute may pass while the page runs)
    assert "`routerscope alerts --evaluate` evaluates them now" in text
    assert "firing for **1 h 00 min** at the last evaluation" in text  # 300 − 240 minutes, not 5 h
    assert "the last alert evaluation (firing for 1 h 00 min)" in text  # the incident row: to the evaluation


def test_oncall_lists_firing_incidents_before_any_resolved_verdict(populated):
    """Finding 2: the top banner was a resolved rollback while PAGE alerts fired below it."""
    _firing_page_alert(populated, minutes_ago=30)
    roll = _episode(
        "rollback_degrade_trigger",
        "short_reply",
        START + timedelta(hours=1),
        START + timedelta(hours=2),
        "resolved",
        START + timedelta(hours=2),
    )
    roll[5] = "rollback"
    with open_warehouse(populated) as client:
        write_alerts(client, [roll])
    app = render("oncall.py", **FIXTURE_DAY)
    texts = [(e.type, getattr(e, "value", "")) for e in app.main]
    order = [
        i
        for i, (_, v) in enumerate(texts)
        if isinstance(v, str) and ("FIRING" in v or "Resolved: **short_reply**" in v)
    ]
    kinds = ["firing" if "FIRING" in texts[i][1] else "resolved" for i in order]
    assert kinds and kinds[0] == "firing" and kinds[-1] == "resolved", kinds


@pytest.mark.timeout(300)
def test_a_blocking_data_quality_failure_is_an_incident_that_opens_the_failing_check(populated, home):
    """Findings 1 and 9: a re-run's reused label ids failed the blocking `labels.unique.label_id` check, yet On-call
    showed no sign, and the data-quality alert's link opened 14,990 decisions. Now it fires on every page and its
    link opens the failing check on the Data quality page."""
    from tests.support.browser import browser_page, dashboard, open_when_up, wait_idle

    _reused_label_ids(populated)
    with dashboard(home) as base, browser_page() as page:
        open_when_up(page, f"{base}/explorer?{urlencode(FIXTURE_DAY)}")
        page.get_by_text("Firing now:").first.wait_for(timeout=60_000)
        wait_idle(page)
        text = page.locator('[data-testid="stMain"]').inner_text()
        line = next(x for x in text[text.index("Firing now:") :].splitlines() if "data-quality" in x)
        assert line.startswith("PAGE") or line.startswith("TICKET"), line
        assert "blocking data-quality failure" in line and "labels.unique.label_id" in line, line
        page.get_by_role("link", name="Open the failing check").first.click()
        page.get_by_role("heading", name="Data quality").first.wait_for(timeout=60_000)
        page.get_by_text("rows broke it").first.wait_for(timeout=60_000)
        wait_idle(page)
        assert "check=labels.unique.label_id" in page.url
        box = page.get_by_text("rows broke it").first.inner_text()
        assert "labels.unique.label_id" in box, box
        assert "FAIL" in box and "rows broke it" in box and "held back" in box, box
        assert page.locator('[data-testid="stException"]').count() == 0


def test_an_outage_incident_is_named_by_its_evidence_and_links_to_its_canned_answers(populated):
    """Findings 4 and 9: incidents read as rule ids with sample sizes, no share or baseline, and the outage link
    opened every decision of the episode. A cloud breaker that opened in the episode names it "cloud outage", with
    the canned-answer share against its baseline, a next step and the runbook section; its link opens the canned
    answers (L4)."""

    first, last = START + timedelta(hours=1), START + timedelta(hours=1, minutes=30)
    with open_warehouse(populated) as client:
        write_alerts(client, [_episode("cloud_breaker_open", "", first, last, "resolved", last)])
        client.command(
            "INSERT INTO routerscope.breaker_events (event_id, event_time, instance_id, boundary, seq, from_state, "
            "to_state, trigger) VALUES (generateUUIDv4(), '2026-11-29 01:05:00', 'r1', 'cloud', 1, 'closed', 'open', "
            "'errors')"
        )
    app = render("oncall.py", **FIXTURE_DAY)
    row = next(m.value for m in app.markdown if "(`cloud_breaker_open`)" in m.value)
    assert "**cloud outage**" in row, row
    assert "canned answers (L4)" in row and "(baseline" in row, row
    assert "cloud breaker opened 1 time" in row and "**Next step**" in row and "docs/runbook.md#cloud-outage" in row
    link = next(m.value for m in app.markdown if "Open in Explorer" in m.value and "cloud_breaker_open" in m.value)
    assert "level=4" in link, link


def test_a_threshold_move_whose_whatif_breaches_an_alert_limit_is_withheld_naming_the_limit(populated, tmp_path):
    """Finding 5: Weekly tuning recommended short_reply 0.60 → 0.90 while the what-if put 0.90 at an 86.4 %
    fallback rate, above the task type's 50 % limit. The at-a-glance table's move comes with its what-if (the real
    what-if over the week: 0.95 sends a1 z0 z1 z2 to the cloud, 100 % of 8 device-entered), and one that breaches
    a limit of the rules is withheld, naming the limit; the same move under a 100 % limit is offered."""
    from routerscope.dashboards import data, summary
    from routerscope.warehouse.analytics.alerting.rules import load_rules

    start, end = datetime(2026, 11, 23, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC)
    week, _ = data.week_and_review(start, end)
    week["calibration"]["intent_classify"].update(recommended_threshold_est=0.95, current_threshold=0.70)
    moves = summary.recommended_moves(week)
    assert moves["intent_classify"] == 0.95
    whatifs = data.whatif_many(tuple(sorted(moves.items())), start, end)
    assert whatifs["intent_classify"]["candidate"]["fallback_rate"] == 1.0

    def rules_with(limit: float):
        path = tmp_path / f"rules-{limit}.yaml"
        path.write_text(
            "version: test.1\nrules:\n"
            "  - name: fallback_rate_high\n    summary: over {limit}\n    metric: fallback_rate\n"
            f"    scope: per_task_type\n    grain: 5m\n    op: '>'\n    limit: {limit}\n    windows: 3\n"
            "    severity: ticket\n    min_n: 1\n    denominator: device_entered\n"
        )
        return list(load_rules(path)[1])

    review = data.review(start, end)
    row = next(r for r in summary.rows(week, review, whatifs, rules_with(0.5)) if r["task type"] == "intent_classify")
    assert "withheld" in row["recommended threshold"], row
    assert "fallback rate 50.0% → 100.0% of 8 device-entered" in row["recommended threshold"], row
    assert "breaches the alert limit fallback rate above 50%" in row["recommended threshold"], row
    assert row["needs"] != "threshold to move"
    offered = next(
        r for r in summary.rows(week, review, whatifs, rules_with(1.0)) if r["task type"] == "intent_classify"
    )
    assert "withheld" not in offered["recommended threshold"] and offered["needs"] in (
        "threshold to move",
        "rollback recommended",
    )


def test_alerts_json_and_report_rollout_read_the_same_rollback_verdicts(populated, home):
    """Finding 6: `report rollout` said "ROLL BACK" for an episode resolved in its window while `alerts --json`
    had `rollback_recommended: {}` (it read only what fired, and took no range). Both now read the stored episodes
    over the same window."""
    roll = _episode(
        "rollback_degrade_trigger",
        "intent_classify",
        START + timedelta(hours=1),
        START + timedelta(hours=2),
        "resolved",
        START + timedelta(hours=2),
    )
    roll[5] = "rollback"
    with open_warehouse(populated) as client:
        write_alerts(client, [roll])
    window = ["--days", "7", "--end", "2026-11-30T00:00:00Z"]
    env = clean_env(home)
    alerts = json.loads(
        subprocess.run(
            [ROUTERSCOPE, "alerts", "--json", *window], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    report = json.loads(
        subprocess.run(
            [ROUTERSCOPE, "report", "rollout", "--json", *window], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    assert alerts["rollback_states"]["intent_classify"]["recommended"] is True
    assert alerts["rollback_states"]["intent_classify"] == report["task_types"]["intent_classify"]["rollback"]
    assert alerts["rollback_window"]["start"] == report["window"]["start"]


def test_whatif_names_the_closest_task_type_and_the_gate_error_lists_every_form(populated, home):
    """Finding 9: `whatif --task-type short_rply` (a typo) exited 0 with "no live events"; the `--fail-if` error
    left out the `_est`, `.low` and `.high` forms."""
    env = clean_env(home)
    typo = subprocess.run(
        [ROUTERSCOPE, "whatif", "--task-type", "intent_clasify", "--threshold", "0.8"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert typo.returncode != 0
    assert typo.stderr.startswith("routerscope: error: ") and "did you mean intent_classify?" in typo.stderr
    gate = subprocess.run(
        [ROUTERSCOPE, "whatif", "--task-type", "intent_classify", "--threshold", "0.8", "--fail-if", "missed>0.1"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert gate.returncode != 0 and len(gate.stderr.strip().splitlines()) == 1
    for form in ("missed_fallback_est.high", "missed_fallback_rate.low", "moved.pass_rate.high"):
        assert form in gate.stderr, gate.stderr
