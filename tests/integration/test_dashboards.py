"""The dashboard pages render against a real embedded warehouse holding the golden fixture, its
metric windows, data-quality results and an alert (streamlit.testing AppTest)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import REPO, copy_warehouse, settings_for
from tests.integration.test_metrics import DECISION_EVENTS, END, LABEL_EVENTS, START, insert
from warehouse import alerting, quality
from warehouse.client import open_warehouse
from warehouse.metrics import compute
from warehouse.migrate import migrate
from warehouse.queries.common import QueryWindow
from warehouse.queries.metric_windows import write_window
from warehouse.queries.review import RERUN_COLUMNS

pytestmark = pytest.mark.integration
PAGES = REPO / "dashboards" / "app_pages"


def fill(client) -> None:
    """The golden fixture, its metric windows, data-quality results and alerts."""
    insert(client, DECISION_EVENTS, LABEL_EVENTS)
    for k in range(12):  # 01:00-02:00 in 5-minute windows (the fixture's A1 is at 01:00)
        w0 = START + timedelta(hours=1) + k * timedelta(minutes=5)
        write_window(client, "5m", w0, w0 + timedelta(minutes=5), compute(client, w0, w0 + timedelta(minutes=5)))
    write_window(client, "1d", START, END, compute(client, START, END, min_n=1))
    quality.store(client, quality.run_suites(client, QueryWindow(START, END), now=END))
    alerting.run(client)


@pytest.fixture
def populated(home, monkeypatch, warehouse_template):
    """This test's own copy of the populated warehouse (filled once per run), and the environment of a
    dashboard reading it."""
    settings = copy_warehouse(warehouse_template("dashboards", fill), home)
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(home))
    for name in [k for k in list(__import__("os").environ) if k.startswith("ROUTERSCOPE_") and k != "ROUTERSCOPE_HOME"]:
        monkeypatch.delenv(name)
    from dashboards import data

    data.clear_caches()
    return settings


def render(page: str) -> AppTest:
    app = AppTest.from_file(str(PAGES / page), default_timeout=60)
    app.run()
    assert not app.exception, app.exception
    return app


def test_oncall_shows_both_denominators(populated):
    app = render("oncall.py")
    labels = [m.label for m in app.metric]
    assert "Fallback rate (of device-entered)" in labels and "Naive fallback rate (all requests)" in labels
    assert any("denominator" in (m.help or "") for m in app.metric)
    assert [m.value for m in app.metric][:2] == ["0.0%", "0.0%"]  # A1: served on device at L0


def test_oncall_lists_the_firing_alerts(populated):
    """The fixture's data is days old as of the evaluation (now): the stale-ingest page is firing."""
    app = render("oncall.py")
    listed = [df for df in (d.value for d in app.dataframe) if "severity" in df.columns]
    assert len(listed) == 1 and set(listed[0]["status"]) == {"firing"}
    assert "Newest decision event older than 10 minutes (ingest stalled?)" in set(listed[0]["summary"])


def test_oncall_draws_breaker_states_over_the_window(populated):
    from instrumentation.contract import BREAKERS
    from routerscope import names
    from tests.events import breaker, dumps
    from warehouse.rows import FACTS

    t = lambda minutes: (START + timedelta(hours=1, minutes=minutes)).isoformat().replace("+00:00", "Z")  # noqa: E731
    events = [
        breaker(boundary="cloud", from_state="closed", to_state="open", event_time=t(10)),
        breaker(boundary="cloud", from_state="open", to_state="half_open", event_time=t(20)),
        breaker(boundary="cloud", from_state="half_open", to_state="closed", event_time=t(21)),
    ]
    parsed = [BREAKERS.parse(dumps(e))[0] for e in events]
    table, columns, build = FACTS[names.TOPIC_BREAKERS]
    with open_warehouse(populated) as client:
        client.insert(
            f"routerscope.{table}",
            build(parsed, names.TOPIC_BREAKERS, [0] * 3, [0, 1, 2]),
            column_names=list(columns),
            column_oriented=True,
        )
    app = render("oncall.py")
    assert [e.label for e in app.expander] == ["3 transitions"]
    assert len(app.get("vega_lite_chart")) == 3  # fallback rates, L2+L3 share, breaker states


def test_tuning_shows_calibration_and_flags_non_monotonic_buckets(populated):
    app = render("tuning.py")
    assert app.selectbox[0].value == "intent_classify"
    assert any("not monotonic" in w.value for w in app.warning)


def test_tuning_shows_the_week_with_intervals_coverage_and_session_calls(populated):
    # The week is [END − 7 d, END): A's a1..a6 plus the four baseline events z0..z3 (session z).
    # Judged fallbacks a2 a3 z3, two labeled (both acceptable) → 2/2, coverage 2/3; the tile is the quality ones
    # (seed 000: never mixed): a2 (quality) 1/1, Wilson [20.7 %, 100 %]; a3 (timeout) 1/1 beside it. Device-served
    # a1 z0 z1 z2, a1 labeled not acceptable → 1/1, coverage 1/4. Cloud calls per session:
    # s1 1, s2 2, s3 2, z 1 → sorted [1, 1, 2, 2]: mean 1.5, p50 1.5, p95 at rank 2.85 → 2.
    app = render("tuning.py")
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["False quality fallbacks (a threshold set too high)"] == "100.0%"
    assert metrics["Missed fallbacks (bad answers shown)"] == "100.0%"
    captions = [c.value for c in app.caption]
    assert any("1 labeled" in c and "label coverage 66.7%" in c and "95% CI 20.7%" in c for c in captions), captions
    assert any(c.startswith("Timeout fallbacks whose device answer was fine: 100.0% of 1 labeled") for c in captions)
    assert any("1 labeled" in c and "label coverage 25.0%" in c for c in captions), captions
    assert (metrics["Mean"], metrics["p50"], metrics["p95"]) == ("1.50", "1.50", "2.00")
    assert any(c.startswith("4 sessions") for c in captions)  # the histogram: two sessions with 1 call, two with 2
    assert metrics["Agreement, all lengths"] == "100.0%"  # A's one shadow event agreed
    assert any("No decision reported a cost" in c for c in captions)


def test_quality_page_lists_checks_and_quarantine(populated):
    app = render("quality.py")
    assert [m.value for m in app.metric][:1] == [str(len(quality.CHECKS))]


def test_quality_page_names_task_types_the_policy_does_not_know(populated):
    from dashboards import data
    from tests.events import decision
    from tests.integration.test_metrics import at, eid

    with open_warehouse(populated) as client:
        insert(client, [decision(event_id=eid(720), request_id="odd", task_type="mystery_task", event_time=at(3))], [])
        quality.store(client, quality.run_suites(client, QueryWindow(START, END), now=END))
    data.clear_caches()
    app = render("quality.py")
    assert any("does not know: mystery_task (1 decisions" in w.value for w in app.warning)


def test_changing_the_target_pass_rate_changes_the_recommendation(populated):
    app = render("tuning.py")
    recommended = lambda: next(m.value for m in app.metric if m.label.startswith("Recommended"))  # noqa: E731
    assert recommended() == "none qualifies"  # from the floor 0.40: 2 of 3 pass < 0.95
    app.slider[0].set_value(0.5).run()
    assert not app.exception
    # the week's labeled confidences start at 0.4 (a2): c = 0.40 holds a2 a4 a1, 2/3 = 0.667 ≥ 0.5 (never 0.00),
    # but METRICS.md §6's local floor holds: a1's bad answer at 0.9 pools with the two good ones below it, so the
    # calibrated pass rate at every cut is 2/3 < 0.85 and nothing qualifies whatever the target
    assert recommended() == "none qualifies"
    assert next(m.value for m in app.metric if m.label == "Evidence floor") == "0.40"


def test_tuning_shows_the_latest_policy_push_before_and_after(populated):
    """METRICS.md §9 on the weekly page: a push on the fixture's day; the table compares the two versions."""
    from dashboards import data
    from tests.events import decision, quality_fallback
    from tests.integration.test_metrics import at, eid

    pushed = [
        quality_fallback(
            event_id=eid(700 + i), request_id=f"push{i}", event_time=at(12 + i), policy_version="2026-11-29.2"
        )
        for i in range(3)
    ]
    pushed.append(
        decision(event_id=eid(710), request_id="push-served", event_time=at(16), policy_version="2026-11-29.2")
    )
    with open_warehouse(populated) as client:
        insert(client, pushed, [])
    data.clear_caches()
    app = render("tuning.py")
    assert any("Latest push: 2026-11-29.1 → 2026-11-29.2" in c.value for c in app.caption)
    table = next(d.value for d in app.dataframe if "metric" in d.value.columns)
    row = table.set_index("metric").loc["fallback rate"]
    # before: the week's 2026-11-29.1 events of intent_classify: a1..a4 and z0..z3 entered, a2 a3 a4 z3 fell back → 4/8;
    # after: 3 of 4 → 75 %
    assert (row["before"], row["after"], row["change (pp)"]) == ("50.0%", "75.0%", "+25.0")


def test_explorer_filters_are_values_not_sql(populated):
    app = render("explorer.py")
    app.selectbox[1].set_value("quality").run()
    assert not app.exception and app.caption[0].value.startswith("1 decisions")  # a2, the only quality fallback
    assert app.subheader[0].value.startswith("Attempts of a2")  # one row: its attempts are shown
    for hostile in ("' OR 1=1 --", "; DROP TABLE decisions", "a2' UNION SELECT 1 --"):
        app.text_input[0].set_value(hostile).run()
        assert not app.exception
        assert app.caption[0].value.startswith("0 decisions")
    with open_warehouse(populated) as client:
        assert client.query("SELECT count() FROM routerscope.decisions").result_rows[0][0] > 0


def test_explorer_filters_by_reason_level_and_network(populated):
    app = render("explorer.py")
    by_label = {box.label: box for box in app.selectbox}
    by_label["Reason"].set_value("device_timeout").run()
    assert app.caption[0].value.startswith("1 decisions")  # a3
    assert app.subheader[0].value.startswith("Attempts of a3")
    by_label = {box.label: box for box in app.selectbox}
    by_label["Reason"].set_value("").run()
    {box.label: box for box in app.selectbox}["Degrade level"].set_value(3).run()
    assert app.caption[0].value.startswith("1 decisions")  # a4, the only L3
    {box.label: box for box in app.selectbox}["Network"].set_value("offline").run()
    assert app.caption[0].value.startswith("0 decisions")


def test_quality_page_shows_schema_versions(populated):
    app = render("quality.py")
    versions = app.dataframe[-2].value  # the last one is freshness
    # the fixture's decisions: DECISION_EVENTS rows as inserted (a1's duplicate included), all version 1
    assert list(versions["events_table"]) == ["decisions", "labels"] and set(versions["schema_version"]) == {1}


def add_review_fixture(settings) -> None:
    """The §10–§13 golden events (v2, with device_stats and the all-cloud cost) and determinism groups."""
    from tests.integration import test_review as tr

    with open_warehouse(settings) as client:
        insert(client, tr.DECISIONS, tr.LABELS)
        client.insert("routerscope.replay_reruns", tr.RERUNS, column_names=list(RERUN_COLUMNS))
    from dashboards import data

    data.clear_caches()


def test_review_page_shows_the_ledger_saving_grading_beside_readiness_and_stages(populated):
    """The review window is the 7 days before the end of the newest live event's day: A_AT_END of the metrics
    fixture is at 2026-11-30 00:00, so [2026-11-24, 2026-12-01): of test_review's v2 events H2 (serious), H3
    and LATE (critical) on tier high; H1 and U1 (2026-11-23) fall before it."""
    add_review_fixture(populated)
    app = render("review.py")
    warnings = " ".join(w.value for w in app.warning)
    assert "high" in warnings and "100.0% of requests ran throttled" in warnings  # 3 of 3
    ledger = next(d.value for d in app.dataframe if "tier" in d.value.columns)
    assert list(ledger["tier"]) == ["high"] and list(ledger["requests"]) == [3]
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Saved share"].endswith("%")
    side = next(d.value for d in app.dataframe if "grading tier" in d.value.columns)
    assert {"intent_classify", "short_reply"} <= set(side["task type"])
    stages = next(d.value for d in app.dataframe if "recommendation" in d.value.columns)
    by_task = stages.set_index("task type")["stage"]
    assert by_task["slot_extract"].startswith("canary (50% of sessions)") and by_task["code_snippet"] == "shadow"


def test_review_page_lists_divergence_samples_without_their_texts(populated):
    from router.engine import Divergence
    from router.request_store import RequestTextStore, store_path
    from tests.integration.test_review import START

    with RequestTextStore(store_path(populated.home)) as store:
        store.add_divergence(
            Divergence("r-div", "code_snippet", "shadow", 600, "xs[::-1]", "list(reversed(xs))"), START
        )
    app = render("review.py")
    table = next(d.value for d in app.dataframe if "device_hash" in d.value.columns)
    assert list(table["request_id"]) == ["r-div"] and table["input_tokens"].iloc[0] == 600
    assert not any(c.endswith("_text") for c in table.columns)  # the texts stay in the store


@pytest.mark.parametrize("page", ["oncall.py", "tuning.py", "review.py", "quality.py", "explorer.py"])
def test_every_page_renders_on_an_empty_warehouse(home, monkeypatch, page):
    with open_warehouse(settings_for(home)) as client:
        migrate(client)
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(home))
    from dashboards import data

    data.clear_caches()
    render(page)


@pytest.mark.timeout(300)  # Streamlit and Chromium start, every page is screenshotted
def test_a_person_sees_the_oncall_page_in_a_real_browser(populated, home, tmp_path):
    """Streamlit renders over a websocket: drive Debian's chromium with playwright and wait for the
    tiles before the screenshot."""
    import subprocess

    add_review_fixture(populated)  # the offload review needs v2 events
    import time

    from playwright.sync_api import sync_playwright

    from tests.conftest import ROUTERSCOPE, clean_env, free_port

    port = free_port()
    server = subprocess.Popen(
        [ROUTERSCOPE, "dashboard", "--port", str(port)],
        env=clean_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                ],
            )
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            deadline = time.monotonic() + 60
            while True:
                try:
                    page.goto(f"http://127.0.0.1:{port}/", timeout=5000)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            page.get_by_text("Fallback rate (of device-entered)").wait_for(timeout=60_000)
            page.get_by_text("Naive fallback rate (all requests)").wait_for(timeout=10_000)
            page.locator(".vega-embed").first.wait_for(timeout=60_000)  # the charts, not just the tiles
            page.wait_for_timeout(1500)
            shots = {}
            for title, wait_for in (
                ("On-call", ".vega-embed"),
                ("Weekly tuning", "text=Current threshold"),
                ("Offload review", "text=Rollout stages"),
                ("Data quality", "text=Quarantine (newest)"),
                ("Explorer", "text=decisions (newest first"),
            ):
                page.get_by_text(title, exact=True).first.click()
                page.locator(wait_for).first.wait_for(timeout=60_000)
                page.wait_for_timeout(1500)
                assert page.locator('[data-testid="stException"]').count() == 0, f"an error box on {title}"
                assert page.get_by_role("heading", name=title).count() >= 1
                shots[title] = tmp_path / f"{title.lower().replace(' ', '_')}.png"  # kept for a look after a run
                page.screenshot(path=str(shots[title]), full_page=True)
            browser.close()
        assert all(shot.stat().st_size > 20_000 for shot in shots.values())  # rendered pages, not blank ones
    finally:
        server.terminate()
        server.wait(20)
    import socket

    with socket.socket() as probe:  # SIGTERM stops `routerscope dashboard` and its Streamlit child
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_oncall_shows_consumer_lag_per_partition_next_to_event_freshness(populated, broker_settings, monkeypatch):
    """Messages behind = the broker's end offset − the loader's stored position, per topic partition."""
    from routerscope import names
    from routerscope.kafka import end_offsets
    from warehouse.loader import OFFSET_COLUMNS

    with open_warehouse(populated) as client:  # the loader stood at offset 2 of decisions[0]
        client.insert(
            "routerscope.ingest_offsets",
            [["routerscope-loader", names.TOPIC_DECISIONS, 0, 2, "t", 2, 0]],
            column_names=list(OFFSET_COLUMNS[:7]),  # all but the fingerprint
        )
    monkeypatch.setenv("ROUTERSCOPE_KAFKA_BOOTSTRAP", broker_settings.kafka_bootstrap())
    ends = end_offsets(broker_settings)
    assert ends is not None and (names.TOPIC_DECISIONS, 0) in ends
    behind = sum(ends.values()) - min(2, ends[(names.TOPIC_DECISIONS, 0)])
    app = render("oncall.py")
    metrics = {m.label: m for m in app.metric}
    assert metrics["Consumer lag"].value == f"{behind} messages"
    assert metrics["Event freshness"].value != "—"
    lag = app.dataframe[-1].value
    row = lag[(lag["topic"] == names.TOPIC_DECISIONS) & (lag["partition"] == 0)].iloc[0]
    assert (row["loaded_to"], row["broker_end"]) == (2, ends[(names.TOPIC_DECISIONS, 0)])


def test_consumer_lag_falls_back_to_freshness_when_the_broker_does_not_answer(populated, monkeypatch):
    from tests.conftest import free_port

    monkeypatch.setenv("ROUTERSCOPE_KAFKA_BOOTSTRAP", f"127.0.0.1:{free_port()}")  # nothing listens there
    app = render("oncall.py")
    metrics = {m.label: m for m in app.metric}
    assert metrics["Consumer lag"].value == "—" and "freshness stands in" in metrics["Consumer lag"].help
