"""The exported Prometheus rule file, checked and unit-tested by the real `promtool` (Debian's `prometheus`,
installed by `make bootstrap`): it loads, and its alerts fire when the project's rules would — the streak as
`for:`, the minimum-sample guard, rates divided after aggregation, the Wilson interval's evidence, per task
type limits. Series are the exporter's (`routerscope_window_…`), one sample a minute."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from routerscope.warehouse.analytics import stats
from routerscope.warehouse.analytics.alerting.prometheus import rule_file
from routerscope.warehouse.analytics.alerting.rules import DEFAULT_RULES, load_rules
from tests.support.home import REPO

pytestmark = pytest.mark.integration

SIM_RULES = REPO / "routerscope" / "router" / "sim" / "alert_rules.yaml"
A = "intent_classify"


def promtool() -> str:
    found = shutil.which("promtool")
    if not found:  # never a skip: CI would pass without ever running these
        pytest.fail("promtool not found: `make bootstrap` installs it (Debian package `prometheus`)")
    return found


def export(tmp_path, rules_path=DEFAULT_RULES):
    version, rules = load_rules(rules_path)
    path = tmp_path / "routerscope.rules.yml"
    path.write_text(yaml.safe_dump(rule_file(version, rules), sort_keys=False))
    return path, version


def window(name: str, value: float, task_type: str = A, minutes: int = 30, **labels) -> dict:
    """One exporter gauge of the latest 5-minute window, holding `value` for `minutes` minutes."""
    selector = ",".join(f'{k}="{v}"' for k, v in {"grain": "5m", "task_type": task_type, **labels}.items())
    return {"series": f"routerscope_window_{name}{{{selector}}}", "values": f"{value}x{minutes}"}


def ends(minutes: int = 40, delay: int = 2, last: int | None = None, grain: str = "5m", **labels) -> dict:
    """The exporter's `routerscope_window_end_timestamp_seconds`, one sample a minute: at minute m the latest
    5-minute window served is the one that ended `delay` minutes or more before (a window appears `delay` minutes
    after its end, as the daemon's settle delay has it); with `last`, no window ending after `last` seconds is
    ever computed (the data stopped)."""
    values = []
    for m in range(minutes + 1):
        end = ((m - delay) // 5) * 300
        values.append(str(end if last is None else min(end, last)))
    selector = ",".join(f'{k}="{v}"' for k, v in {"grain": grain, **labels}.items())
    return {"series": f"routerscope_window_end_timestamp_seconds{{{selector}}}", "values": " ".join(values)}


def fallbacks(entered: int, quality: int, timeout: int = 0, error: int = 0, task_type: str = A, **extra) -> list:
    return [
        window("device_entered", entered, task_type, **extra),
        window("fallbacks", quality, task_type, type="quality", **extra),
        window("fallbacks", timeout, task_type, type="timeout", **extra),
        window("fallbacks", error, task_type, type="error", **extra),
        window("fallbacks", 0, task_type, type="capability", **extra),
    ]


def alert(name: str, at: str, firing: list[dict] | None = None) -> dict:
    return {"eval_time": at, "alertname": name, "exp_alerts": firing or []}


def run_promtool_tests(tmp_path, rules, tests: list[dict]) -> subprocess.CompletedProcess:
    spec = tmp_path / "routerscope.test.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run([promtool(), "test", "rules", str(spec)], capture_output=True, text=True, timeout=120)


def labels(version: str, severity: str, **more) -> dict:
    return {"exp_labels": {"severity": severity, "routerscope_rule_version": version, **more}}


def annotated(rules, name: str, value: float, expected: dict) -> dict:
    """`expected` with the alert's annotations as Prometheus renders them at `value`."""
    doc = yaml.safe_load(rules.read_text())
    found = next(r for g in doc["groups"] for r in g["rules"] if r.get("alert") == name)
    shown = str(int(value)) if float(value).is_integer() else repr(float(value))  # as Go's %v prints it
    text = {k: v.replace("{{ $value }}", shown) for k, v in found["annotations"].items()}
    return {**expected, "exp_annotations": text}


@pytest.mark.parametrize("rules_path", [DEFAULT_RULES, SIM_RULES], ids=["shipped", "demo"])
def test_promtool_checks_the_exported_rules(tmp_path, rules_path):
    path, _ = export(tmp_path, rules_path)
    done = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize("rules_path", [DEFAULT_RULES, SIM_RULES], ids=["shipped", "demo"])
def test_rules_on_a_population_estimate_are_left_out_and_named(tmp_path, rules_path):
    """The exporter has no per-stratum series, so the two rules that read §3c's estimates cannot be expressed in
    PromQL: they are left out of the file (never replaced by the labeled share), and `rules export` names them."""
    from routerscope.warehouse.analytics.alerting.prometheus import unexported
    from tests.support.home import clean_env, run_cli

    path, _ = export(tmp_path, rules_path)
    exported = {r["alert"] for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"] if "alert" in r}
    _, rules = load_rules(rules_path)
    assert {r.name for r in rules} - exported == {"false_fallback_high", "rollback_route_accuracy"}
    assert [why.split(" ")[0] for why in unexported(rules)] == ["false_fallback_high", "rollback_route_accuracy"]
    done = run_cli("rules", "export", "--format", "prometheus", env=clean_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "# Not exported: false_fallback_high (reads false_fallback_by_type.quality_est.rate" in done.stdout
    assert "not exported: rollback_route_accuracy" in done.stderr


def test_promtool_unit_tests_of_the_shipped_rules(tmp_path):
    rules, version = export(tmp_path)

    def ticket(value):
        return annotated(rules, "fallback_rate_high", value, labels(version, "ticket", task_type=A))

    tests = [
        # 16 of 40 device-entered fell back (0.4 > 0.3): pending for two windows and the freshness allowance (4 min),
        # firing once the third window has come and the second could no longer be the latest
        {
            "interval": "1m",
            "input_series": [ends(), *fallbacks(40, 16)],
            "alert_rule_test": [
                alert("fallback_rate_high", "13m"),
                alert("fallback_rate_high", "14m", [ticket(0.4)]),
                alert("routerscope_windows_stale", "30m"),
            ],
        },
        # minimum samples: 15 of 29 (0.52) is too few to act on; 15 of 30 (0.5) is enough
        {
            "interval": "1m",
            "input_series": [ends(), *fallbacks(29, 15)],
            "alert_rule_test": [alert("fallback_rate_high", "20m")],
        },
        {
            "interval": "1m",
            "input_series": [ends(), *fallbacks(30, 15)],
            "alert_rule_test": [alert("fallback_rate_high", "20m", [ticket(0.5)])],
        },
        # the types add up before dividing: 5 + 5 + 2 of 40 is 0.3 (not over); 5 + 5 + 3 of 40 is 0.325
        {
            "interval": "1m",
            "input_series": [ends(), *fallbacks(40, 5, 5, 2)],
            "alert_rule_test": [alert("fallback_rate_high", "20m")],
        },
        {
            "interval": "1m",
            "input_series": [ends(), *fallbacks(40, 5, 5, 3)],
            "alert_rule_test": [alert("fallback_rate_high", "20m", [ticket(13 / 40)])],
        },
        # divided after aggregation: two warehouses' exporters, 20 of 30 (0.67) and 0 of 70, pool to 20 of 100
        # (0.2): no alert, where averaging their ratios (0.33) would have paged
        {
            "interval": "1m",
            "input_series": [ends(instance="eu"), ends(instance="us")]
            + fallbacks(30, 20, instance="eu")
            + fallbacks(70, 0, instance="us"),
            "alert_rule_test": [alert("fallback_rate_high", "20m")],
            "promql_expr_test": [
                {
                    "expr": "task_type:routerscope_fallback_rate:ratio_5m",
                    "eval_time": "5m",
                    "exp_samples": [
                        {"labels": f'task_type:routerscope_fallback_rate:ratio_5m{{task_type="{A}"}}', "value": 0.2}
                    ],
                }
            ],
        },
        # the Wilson interval's evidence: 2 degrade triggers in 35 (5.7 %) cannot tell a 5 % limit from noise;
        # 10 in 40 can (low end 0.1419 by hand: centre 0.2719, half 0.1300)
        {
            "interval": "1m",
            "input_series": [ends(), window("device_entered", 35), window("degrade_triggered", 2)],
            "alert_rule_test": [alert("rollback_degrade_trigger", "20m")],
        },
        {
            "interval": "1m",
            "input_series": [ends(), window("device_entered", 40), window("degrade_triggered", 10)],
            "promql_expr_test": [
                {
                    "expr": "task_type:routerscope_degrade_trigger_rate:wilson_low_5m",
                    "eval_time": "5m",
                    "exp_samples": [
                        {
                            "labels": f'task_type:routerscope_degrade_trigger_rate:wilson_low_5m{{task_type="{A}"}}',
                            "value": stats.wilson(10, 40)[0],
                        }
                    ],
                }
            ],
            "alert_rule_test": [
                alert("rollback_degrade_trigger", "13m"),
                alert(
                    "rollback_degrade_trigger",
                    "14m",
                    [
                        annotated(
                            rules,
                            "rollback_degrade_trigger",
                            stats.wilson(10, 40)[0],
                            labels(version, "page", task_type=A, action="rollback"),
                        )
                    ],
                ),
            ],
        },
        # drift needs 50 requests behind the flag
        {
            "interval": "1m",
            "input_series": [
                ends(),
                {"series": 'routerscope_window_l2_l3_drifting{grain="5m"}', "values": "1x30"},
                window("decisions", 49),
            ],
            "alert_rule_test": [alert("l2_l3_drift", "20m")],
        },
        {
            "interval": "1m",
            "input_series": [
                ends(),
                {"series": 'routerscope_window_l2_l3_drifting{grain="5m"}', "values": "1x30"},
                window("decisions", 25),
                window("decisions", 25, "short_reply"),
            ],
            "alert_rule_test": [
                alert("l2_l3_drift", "13m"),
                alert("l2_l3_drift", "14m", [annotated(rules, "l2_l3_drift", 1, labels(version, "ticket"))]),
            ],
        },
        # a device breaker pages at once; the newest event 600 s old is not stale yet, 660 s is
        {
            "interval": "1m",
            "input_series": [
                {"series": 'routerscope_breakers_open{boundary="device"}', "values": "0 1x10"},
                {"series": "routerscope_exporter_refresh_timestamp_seconds", "values": "0+60x20"},
                {"series": "routerscope_newest_event_timestamp_seconds", "values": "0x20"},
            ],
            "alert_rule_test": [
                alert("device_breaker_open", "0m"),
                alert(
                    "device_breaker_open", "1m", [annotated(rules, "device_breaker_open", 1, labels(version, "page"))]
                ),
                alert("ingest_stale", "10m"),
                alert("ingest_stale", "11m", [annotated(rules, "ingest_stale", 660, labels(version, "page"))]),
            ],
        },
    ]
    done = run_promtool_tests(tmp_path, rules, tests)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_of_per_task_type_limits(tmp_path):
    """The demo's rules: intent_classify's limit is 0.40, short_reply's 0.50, an unnamed task type's 0.30."""
    rules, version = export(tmp_path, SIM_RULES)
    tests = [
        {
            "interval": "1m",
            "input_series": [ends()]
            + fallbacks(40, 18)
            + fallbacks(40, 18, task_type="short_reply")
            + fallbacks(40, 13, task_type="new_task"),
            "alert_rule_test": [
                alert(
                    "fallback_rate_high",
                    "20m",
                    [
                        annotated(
                            rules, "fallback_rate_high", 18 / 40, labels(version, "ticket", task_type=A)
                        ),  # 0.45 > 0.40
                        # 0.325 > 0.30; short_reply's 0.45 is under its 0.50
                        annotated(
                            rules, "fallback_rate_high", 13 / 40, labels(version, "ticket", task_type="new_task")
                        ),
                    ],
                )
            ],
        },
    ]
    done = run_promtool_tests(tmp_path, rules, tests)
    assert done.returncode == 0, done.stdout + done.stderr


DEPLOY = REPO / "deploy" / "prometheus"


def test_the_shipped_rule_file_is_the_export_of_the_default_rules(tmp_path):
    """deploy/prometheus/routerscope.rules.yml is what `rules export --format prometheus` writes today: a rule
    changed without regenerating it fails here."""
    from tests.support.home import clean_env, run_cli

    done = run_cli("rules", "export", "--format", "prometheus", env=clean_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (DEPLOY / "routerscope.rules.yml").read_text() == done.stdout


def test_the_shipped_promtool_tests_pass_including_the_stale_window():
    """deploy/prometheus/routerscope.test.yml as a user runs it: three fresh windows fire a streak rule; one stale
    window (the data stopped, the exporter still serving it) fires `routerscope_windows_stale` and never the
    streak rules `l2_l3_drift` and `fallback_rate_high`; two windows are still short of three; a streak restarts
    after a gap; an exporter with no window at all is stale."""
    done = subprocess.run(
        [promtool(), "test", "rules", str(DEPLOY / "routerscope.test.yml")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_a_single_stale_window_never_fires_a_streak_however_late_it_came(tmp_path):
    """The freshness bound holds for any delay: one breaching window first served 0-4 minutes after its end, then
    nothing new, never fires a 3-window streak (each delay a separate promtool case), and the stale alert fires."""
    rules, _ = export(tmp_path)
    tests = []
    for delay in range(0, 5):
        tests.append(
            {
                "interval": "1m",
                "input_series": [
                    ends(minutes=60, delay=delay, last=0),
                    *fallbacks(40, 16),
                    {"series": 'routerscope_window_l2_l3_drifting{grain="5m"}', "values": "1x60"},
                    window("decisions", 80, minutes=60),
                ],
                "alert_rule_test": [
                    *(alert(name, f"{m}m") for name in ("fallback_rate_high", "l2_l3_drift") for m in range(0, 61, 1)),
                ],
            }
        )
    done = run_promtool_tests(tmp_path, rules, tests)
    assert done.returncode == 0, done.stdout + done.stderr
