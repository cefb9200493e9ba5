"""Hostile command-line inputs end in one `routerscope: error: …` line (or argparse's usage error),
never a traceback (issue: no message or input stops the pipeline with a stack trace)."""

from __future__ import annotations

import pytest

from routerscope import cli

WINDOW = ["--start", "2026-11-29", "--end", "2026-11-30"]


def run(monkeypatch, capsys, tmp_path, *argv: str, **env: str) -> tuple[int, str]:
    for key in ("ROUTERSCOPE_CLICKHOUSE_DSN", "ROUTERSCOPE_KAFKA_BOOTSTRAP"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(tmp_path / "home"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse rejects the value before any command runs
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.strip().splitlines()[-1] if err.strip() else ""


@pytest.mark.parametrize(
    "argv, message",
    [
        (["metrics", *WINDOW, "--baseline-days", "nan"], "'nan' must be a finite number above 0"),
        (["metrics", *WINDOW, "--baseline-days", "inf"], "'inf' must be a finite number above 0"),
        (["metrics", *WINDOW, "--baseline-days", "-3"], "'-3' must be a finite number above 0"),
        (["metrics", *WINDOW, "--target", "nan"], "'nan' must be a finite number above 0"),
        (["load", "--idle-timeout", "-1"], "'-1' must be a finite number above 0"),
        (["exporter", "--max-task-types", "0"], "'0' is not a whole number from 1 to 10000"),
        (["exporter", "--max-task-types", "99999999999"], "'99999999999' is not a whole number from 1 to 10000"),
        (["exporter", "--max-task-types", "nan"], "'nan' is not a whole number from 1 to 10000"),
        (["simulate", "--corrupt", "-3"], "'-3' must be at least 0"),
        (["dashboard", "--port", "70000"], "'70000' must be at most 65535"),
        (["broker", "start", "--port", "0"], "'0' must be at least 1"),
        (["demo", "--dashboard-port", "99999"], "'99999' must be at most 65535"),
        (["simulate", "--span-minutes", "99999999999"], "'99999999999' must be at most 5270400"),
        (["demo", "--span-minutes", "99999999999"], "'99999999999' must be at most 5270400"),
        (["demo", "--requests", "99999999999"], "'99999999999' must be at most 10000000"),
        (["simulate", "--requests", "99999999999"], "'99999999999' must be at most 10000000"),
        # issue 40: bounds that were missing (a traceback, or no bound at all)
        (["simulate", "--corrupt", "1000000000"], "'1000000000' must be at most 1000000"),
        (
            ["load", "--partitions", "9223372036854775808"],
            "partition 9223372036854775808 is past Kafka's largest, 2147483646",
        ),
        (
            ["whatif", "--task-type", "t", "--threshold", "0.5", "--days", "1e-300"],
            "'1e-300' must be from one minute (0.0007) to ten years (3650) of days",
        ),
        (
            ["whatif", "--task-type", "t", "--threshold", "0.5", "--days", "1e9"],
            "'1e9' must be from one minute (0.0007) to ten years (3650) of days",
        ),
    ],
)
def test_numbers_that_are_not_numbers_are_refused(monkeypatch, capsys, tmp_path, argv, message):
    code, line = run(monkeypatch, capsys, tmp_path, *argv)
    assert code == 2 and line.endswith(message)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["metrics", "--start", "2026-11-29", "--end", "9999-12-31"],
            "--end '9999-12-31' is outside the times the warehouse stores",
        ),
        (
            ["metrics", "--start", "1066-10-14", "--end", "2026-11-30"],
            "--start '1066-10-14' is outside the times the warehouse stores",
        ),
        (["metrics", *WINDOW, "--baseline-days", "1e9"], "--baseline-days 1e+09 is more than ten years"),
        (["metrics", *WINDOW, "--baseline-days", "1e-300"], "--baseline-days 1e-300 is shorter than a minute"),
        (["dq", "--day", "9999-12-31"], "--day '9999-12-31' is outside the times the warehouse stores"),
    ],
)
def test_times_past_what_the_warehouse_stores_are_refused(monkeypatch, capsys, tmp_path, argv, message):
    code, line = run(monkeypatch, capsys, tmp_path, *argv)
    assert code == 2 and line.startswith(f"routerscope: error: {message}")


@pytest.mark.parametrize("dsn", ["http://[::1", "http://warehouse:port/", "http://warehouse:99999"])
def test_an_unparsable_dsn_is_one_line_without_the_dsn(monkeypatch, capsys, tmp_path, dsn):
    code, line = run(monkeypatch, capsys, tmp_path, "migrate", ROUTERSCOPE_CLICKHOUSE_DSN=dsn)
    assert code == 2 and line.startswith("routerscope: error: ROUTERSCOPE_CLICKHOUSE_DSN is not a valid URL")


def test_a_home_that_cannot_be_used_is_one_line(monkeypatch, capsys, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the home should be")
    monkeypatch.setenv("ROUTERSCOPE_HOME", str(blocker))
    monkeypatch.delenv("ROUTERSCOPE_CLICKHOUSE_DSN", raising=False)
    code = cli.main(["migrate"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("routerscope: error: ") and str(blocker) in err and "ROUTERSCOPE_HOME" in err


def test_an_alert_rules_file_that_is_not_text_is_one_line(monkeypatch, capsys, tmp_path):
    """Issue: a binary ROUTERSCOPE_ALERT_RULES ended in a UnicodeDecodeError traceback."""
    rules = tmp_path / "rules.yaml"
    rules.write_bytes(bytes(range(128, 256)) * 3)
    code, line = run(monkeypatch, capsys, tmp_path, "alerts", "--evaluate", ROUTERSCOPE_ALERT_RULES=str(rules))
    assert code == 2 and line == f"routerscope: error: alert rules {rules} is not a text (UTF-8 YAML) file"


@pytest.mark.parametrize("url", ["not-a-url", "ftp://hooks.example.com/x", "http://", "https://host:99999/x"])
def test_an_alert_webhook_that_is_not_an_http_url_is_one_line(monkeypatch, capsys, tmp_path, url):
    """Issue: ROUTERSCOPE_ALERT_WEBHOOK=not-a-url ended in a traceback."""
    code, line = run(monkeypatch, capsys, tmp_path, "migrate", ROUTERSCOPE_ALERT_WEBHOOK=url)
    assert code == 2 and line.startswith(f"routerscope: error: ROUTERSCOPE_ALERT_WEBHOOK={url!r} is not an http(s) URL")


@pytest.mark.parametrize("value", ["lots", "5%%", "120%", "1XB", "-1GB", "5%,6%"])
def test_a_free_space_floor_that_is_not_one_is_one_line(monkeypatch, capsys, tmp_path, value):
    code, line = run(monkeypatch, capsys, tmp_path, "migrate", ROUTERSCOPE_WAREHOUSE_MIN_FREE=value)
    assert code == 2 and line.startswith(f"routerscope: error: ROUTERSCOPE_WAREHOUSE_MIN_FREE={value!r}: give a share")
