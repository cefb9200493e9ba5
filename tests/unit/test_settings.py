from pathlib import Path

import pytest

from routerscope.core.errors import ConfigError
from routerscope.core.settings import Settings, WarehouseDsn, spool_fsync_interval


def test_defaults_put_everything_under_the_home(tmp_path):
    s = Settings.from_env({"ROUTERSCOPE_HOME": str(tmp_path)})
    assert s.home == tmp_path
    assert s.warehouse.embedded and s.warehouse.path == tmp_path / "warehouse"
    assert s.topic_partitions == 3
    assert s.kafka_security.protocol == "PLAINTEXT"


def test_env_bootstrap_wins_over_the_recorded_local_broker(tmp_path):
    (tmp_path / "broker.json").write_text('{"bootstrap": "127.0.0.1:1234"}')
    assert Settings.from_env({"ROUTERSCOPE_HOME": str(tmp_path)}).kafka_bootstrap() == "127.0.0.1:1234"
    s = Settings.from_env({"ROUTERSCOPE_HOME": str(tmp_path), "ROUTERSCOPE_KAFKA_BOOTSTRAP": "kafka:9093"})
    assert s.kafka_bootstrap() == "kafka:9093"


def test_no_broker_anywhere_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="routerscope broker start"):
        Settings.from_env({"ROUTERSCOPE_HOME": str(tmp_path)}).kafka_bootstrap()


@pytest.mark.parametrize(
    "dsn, embedded, path",
    [
        ("chdb:///var/lib/rs", True, Path("/var/lib/rs")),
        ("http://default:pw@localhost:8123", False, None),
        ("https://ch.example:8443/routerscope", False, None),
    ],
)
def test_dsn_schemes_understood(dsn, embedded, path):
    parsed = WarehouseDsn.parse(dsn)
    assert (parsed.embedded, parsed.path) == (embedded, path)


@pytest.mark.parametrize(
    "dsn, message",
    [
        ("postgres://localhost/db", "unknown scheme 'postgres'"),
        ("chdb://relative/path", "absolute path"),
        ("http://", "no host"),
    ],
)
def test_bad_dsn_is_a_config_error_naming_the_fix(dsn, message):
    with pytest.raises(ConfigError, match=message):
        WarehouseDsn.parse(dsn)


def test_password_is_redacted_in_messages():
    assert WarehouseDsn.parse("http://u:secret@h:8123").redacted() == "http://u:***@h:8123"


@pytest.mark.parametrize(
    "env, message",
    [
        ({"ROUTERSCOPE_TOPIC_PARTITIONS": "many"}, "not an integer"),
        ({"ROUTERSCOPE_TOPIC_PARTITIONS": "0"}, "at least 1"),
        ({"ROUTERSCOPE_KAFKA_SECURITY_PROTOCOL": "TLS"}, "SASL_SSL"),
        ({"ROUTERSCOPE_OTLP_TOPIC": "otlp spans!"}, "not a Kafka topic name"),
        ({"ROUTERSCOPE_OTLP_TOPIC": "t" * 250}, "not a Kafka topic name"),
        ({"ROUTERSCOPE_OTLP_TOPIC": ".."}, "not a Kafka topic name"),
    ],
)
def test_bad_numbers_and_protocols_rejected(tmp_path, env, message):
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({"ROUTERSCOPE_HOME": str(tmp_path), **env})


def test_sasl_settings_reach_both_kafka_clients(tmp_path):
    s = Settings.from_env(
        {
            "ROUTERSCOPE_HOME": str(tmp_path),
            "ROUTERSCOPE_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
            "ROUTERSCOPE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "ROUTERSCOPE_KAFKA_SASL_USERNAME": "u",
            "ROUTERSCOPE_KAFKA_SASL_PASSWORD": "p",
        }
    )
    assert s.kafka_security.kafka_python()["sasl_mechanism"] == "SCRAM-SHA-512"
    assert s.kafka_security.kafka_python()["security_protocol"] == "SASL_SSL"
    rd = s.kafka_security.librdkafka()
    assert (rd["security.protocol"], rd["sasl.username"], rd["sasl.password"]) == ("sasl_ssl", "u", "p")


@pytest.mark.parametrize(
    "raw, parsed",
    [
        ("5%,1GB", (0.05, 1 << 30)),
        ("1GB,5%", (0.05, 1 << 30)),
        ("500MB", (None, 500 << 20)),
        ("10%", (0.10, None)),
        ("1.5 gb", (None, 3 << 29)),
        ("0", (None, 0)),
    ],
)
def test_the_free_space_floor_reads_a_share_a_size_or_both(raw, parsed):
    from routerscope.core.settings import parse_min_free

    assert parse_min_free(raw) == parsed


def test_the_alertmanager_and_dashboard_urls_are_checked_and_lose_a_trailing_slash(tmp_path):
    env = {"ROUTERSCOPE_HOME": str(tmp_path), "ROUTERSCOPE_ALERTMANAGER_URL": "http://am.internal:9093/"}
    settings = Settings.from_env(env)
    assert settings.alertmanager_url == "http://am.internal:9093"
    assert settings.dashboard_url == "http://127.0.0.1:8501"  # unset: the dashboard's own default
    assert Settings.from_env({"ROUTERSCOPE_HOME": str(tmp_path)}).alertmanager_url is None
    with pytest.raises(ConfigError, match="ROUTERSCOPE_ALERTMANAGER_URL='am:9093' is not an http"):
        Settings.from_env({**env, "ROUTERSCOPE_ALERTMANAGER_URL": "am:9093"})
    with pytest.raises(ConfigError, match="ROUTERSCOPE_DASHBOARD_URL"):
        Settings.from_env({**env, "ROUTERSCOPE_DASHBOARD_URL": "ftp://x"})


@pytest.mark.parametrize(
    ("raw", "port"),
    [(None, None), ("", None), ("9464", 9464), ("1", 1), ("65535", 65535)],
)
def test_the_deployments_exporter_port_is_off_unless_set(tmp_path, raw, port):
    env = {"ROUTERSCOPE_HOME": str(tmp_path)} | ({"ROUTERSCOPE_EXPORTER_PORT": raw} if raw is not None else {})
    assert Settings.from_env(env).exporter_port == port


@pytest.mark.parametrize(("raw", "message"), [("0", "at least 1"), ("65536", "not a TCP port"), ("x", "integer")])
def test_an_exporter_port_out_of_range_is_a_setting_error(tmp_path, raw, message):
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({"ROUTERSCOPE_HOME": str(tmp_path), "ROUTERSCOPE_EXPORTER_PORT": raw})


def test_an_otlp_topic_kafka_accepts_is_taken_as_written(tmp_path):
    env = {"ROUTERSCOPE_HOME": str(tmp_path)}
    assert (
        Settings.from_env({**env, "ROUTERSCOPE_OTLP_TOPIC": "team-a.otlp_spans.v1"}).otlp_topic
        == "team-a.otlp_spans.v1"
    )
    assert Settings.from_env(env).otlp_topic == "otlp_spans"


@pytest.mark.parametrize(
    "raw, seconds", [(None, 1.0), ("", 1.0), ("0", 0.0), ("0.25", 0.25), (" 5 ", 5.0), ("3600", 3600.0)]
)
def test_the_spool_fsync_interval_is_read_in_seconds(tmp_path, raw, seconds):
    env = {"ROUTERSCOPE_HOME": str(tmp_path)}
    if raw is not None:
        env["ROUTERSCOPE_SPOOL_FSYNC_INTERVAL_S"] = raw
    assert Settings.from_env(env).spool_fsync_interval_s == seconds
    assert spool_fsync_interval(env) == seconds


@pytest.mark.parametrize("raw", ["-1", "abc", "nan", "inf", "1e9", "3601"])
def test_a_spool_fsync_interval_out_of_range_is_one_line_naming_the_variable(tmp_path, raw):
    env = {"ROUTERSCOPE_HOME": str(tmp_path), "ROUTERSCOPE_SPOOL_FSYNC_INTERVAL_S": raw}
    with pytest.raises(ConfigError, match=r"^ROUTERSCOPE_SPOOL_FSYNC_INTERVAL_S=.*between 0 .* and 3600") as caught:
        Settings.from_env(env)
    assert "\n" not in str(caught.value)
