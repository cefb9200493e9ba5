"""Settings, read in one place from the environment (docs/architecture.md §6), the same way by every command.

| variable | default |
|---|---|
| `ROUTERSCOPE_HOME` | `./.routerscope` (data directory: warehouse, broker pid/log, spool) |
| `ROUTERSCOPE_KAFKA_BOOTSTRAP` | the address recorded by `routerscope broker start` under the home |
| `ROUTERSCOPE_CLICKHOUSE_DSN` | `chdb://<home>/warehouse` (embedded); `http(s)://user:pass@host:8123` for a server |
| `ROUTERSCOPE_KAFKA_SECURITY_PROTOCOL` | `PLAINTEXT` (`SSL`, `SASL_PLAINTEXT`, `SASL_SSL`) |
| `ROUTERSCOPE_KAFKA_SASL_MECHANISM` | `PLAIN` (`SCRAM-SHA-256`, `SCRAM-SHA-512`) |
| `ROUTERSCOPE_KAFKA_SASL_USERNAME` / `_PASSWORD` | unset |
| `ROUTERSCOPE_KAFKA_SSL_CAFILE` | unset (system CAs) |
| `ROUTERSCOPE_TOPIC_PARTITIONS` | `3` (partitions per topic when the project creates them) |
| `ROUTERSCOPE_ALERT_WEBHOOK` | unset (alerts are stored, not delivered) |
| `ROUTERSCOPE_WAREHOUSE_MIN_FREE` | `5%,1GB` (free space a load keeps on the embedded warehouse disk; the smaller) |
| `ROUTERSCOPE_SPOOL_FSYNC_INTERVAL_S` | `1` (seconds between the emitter spool's fsyncs; 0: every append) |
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from routerscope.core import names
from routerscope.core.errors import ConfigError

BROKER_RECORD = "broker.json"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None

    def kafka_python(self) -> dict:
        """Options for kafka-python clients (the router's emitter, `produce`)."""
        opts: dict = {"security_protocol": self.protocol}
        if self.protocol.startswith("SASL"):
            opts.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        if self.ssl_cafile:
            opts["ssl_cafile"] = self.ssl_cafile
        return opts

    def librdkafka(self) -> dict:
        """Options for confluent-kafka clients (the loader, the admin client)."""
        opts: dict = {"security.protocol": self.protocol.lower()}
        if self.protocol.startswith("SASL"):
            opts.update(
                {
                    "sasl.mechanism": self.sasl_mechanism,
                    "sasl.username": self.sasl_username or "",
                    "sasl.password": self.sasl_password or "",
                }
            )
        if self.ssl_cafile:
            opts["ssl.ca.location"] = self.ssl_cafile
        return opts


@dataclass(frozen=True)
class WarehouseDsn:
    """A parsed `ROUTERSCOPE_CLICKHOUSE_DSN`: embedded (chDB data directory) or a server URL."""

    raw: str
    embedded: bool
    path: Path | None  # data directory, embedded only

    @classmethod
    def parse(cls, dsn: str) -> WarehouseDsn:
        try:
            parsed = urlparse(dsn)
            parsed.port  # noqa: B018 - raises ValueError on a port that is not a number in range
        except ValueError as exc:
            raise ConfigError(f"ROUTERSCOPE_CLICKHOUSE_DSN is not a valid URL ({exc})") from None
        scheme = parsed.scheme.lower()
        if scheme == "chdb":
            path = (parsed.netloc + parsed.path) if parsed.netloc else parsed.path
            if not path or not path.startswith("/"):
                raise ConfigError(
                    f"ROUTERSCOPE_CLICKHOUSE_DSN={dsn!r}: an embedded DSN needs an absolute path, "
                    "e.g. chdb:///var/lib/routerscope/warehouse"
                )
            return cls(raw=f"chdb://{path}", embedded=True, path=Path(path))
        if scheme in ("http", "https"):
            if not parsed.hostname:
                raise ConfigError(f"ROUTERSCOPE_CLICKHOUSE_DSN={dsn!r}: no host in the URL")
            return cls(raw=dsn, embedded=False, path=None)
        raise ConfigError(
            f"ROUTERSCOPE_CLICKHOUSE_DSN={dsn!r}: unknown scheme {parsed.scheme!r}; "
            "use chdb:///abs/path (embedded) or http(s)://user:password@host:8123 (server)"
        )

    def redacted(self) -> str:
        parsed = urlparse(self.raw)
        if parsed.password:
            return self.raw.replace(f":{parsed.password}@", ":***@")
        return self.raw


# The free space an embedded warehouse's disk must keep: a share of the disk and an absolute size; the
# smaller of the two applies (5 % of a 2 TB disk is 100 GB, far more than a load needs).
DEFAULT_MIN_FREE = "5%,1GB"
_SIZE_UNITS = {"": 1, "B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def parse_min_free(raw: str, name: str = "ROUTERSCOPE_WAREHOUSE_MIN_FREE") -> tuple[float | None, int | None]:
    """`5%`, `1GB`, `5%,1GB` (the smaller applies) or `0` (no floor) as (share of the disk, bytes)."""
    share: float | None = None
    size: int | None = None
    for part in raw.replace(" ", "").upper().split(","):
        try:
            if part.endswith("%"):
                value = float(part[:-1])
                if share is not None or not 0 <= value < 100:
                    raise ValueError
                share = value / 100
                continue
            number = part.rstrip("KMGTB")
            value = float(number) * _SIZE_UNITS[part[len(number) :]]
            if size is not None or not 0 <= value < 1 << 60:
                raise ValueError
            size = int(value)
        except (ValueError, KeyError):
            raise ConfigError(
                f"{name}={raw!r}: give a share of the disk and/or a size, e.g. 5%,1GB or 500MB (0: no floor)"
            ) from None
    return share, size


def _http_url(name: str, url: str | None, example: str = "http://alertmanager:9093", strip: bool = True) -> str | None:
    """An http(s) URL with a host (trailing slashes dropped unless `strip` is off), or unset; ConfigError naming
    the variable and an example otherwise."""
    if url is None:
        return None
    try:
        parsed = urlparse(url)
        parsed.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError:
        parsed = None
    if parsed is None or parsed.scheme.lower() not in ("http", "https") or not parsed.hostname:
        raise ConfigError(f"{name}={url[:200]!r} is not an http(s) URL, e.g. {example}")
    return url.rstrip("/") if strip else url


SPOOL_FSYNC_INTERVAL_ENV = "ROUTERSCOPE_SPOOL_FSYNC_INTERVAL_S"
DEFAULT_SPOOL_FSYNC_INTERVAL_S = 1.0


def spool_fsync_interval(env: dict | None = None) -> float:
    """Seconds between the emitter spool's fsyncs (ROUTERSCOPE_SPOOL_FSYNC_INTERVAL_S, default 1): what a power
    cut can lose of what reached the spool; 0 syncs every append before it returns. Read on its own as well
    as in `Settings`, because an emitter can be made without settings."""
    raw = (os.environ if env is None else env).get(SPOOL_FSYNC_INTERVAL_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_SPOOL_FSYNC_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:  # (NaN fails this too)
        raise ConfigError(
            f"{SPOOL_FSYNC_INTERVAL_ENV}={raw[:100]!r}: give seconds between 0 (fsync every event) and 3600, e.g. 1"
        )
    return value


def _int_env(env: dict, name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw!r} must be at least {minimum}")
    return value


def _port_env(env: dict, name: str) -> int | None:
    """A TCP port from `name`, or None when unset."""
    if not env.get(name):
        return None
    port = _int_env(env, name, 0, minimum=1)
    if port > 65535:
        raise ConfigError(f"{name}={env[name]!r} is not a TCP port (1-65535)")
    return port


def _topic_env(env: dict, name: str, default: str) -> str:
    """A Kafka topic name from `name` (Kafka's own rule: 1-249 of letters, digits, `.`, `_`, `-`; not `.` or `..`)."""
    topic = env.get(name) or default
    if len(topic) > 249 or topic in (".", "..") or not re.fullmatch(r"[A-Za-z0-9._-]+", topic):
        raise ConfigError(f"{name}={topic[:100]!r} is not a Kafka topic name (letters, digits, '.', '_', '-'; ≤ 249)")
    return topic


@dataclass(frozen=True)
class Settings:
    home: Path
    kafka_bootstrap_env: str | None
    warehouse: WarehouseDsn
    kafka_security: KafkaSecurity
    topic_partitions: int
    alert_webhook: str | None
    alert_rules: Path | None = (
        None  # None: the defaults shipped in routerscope/warehouse/analytics/alerting/alert_rules.yaml
    )
    alertmanager_url: str | None = None  # ROUTERSCOPE_ALERTMANAGER_URL: alerts also go to its /api/v2/alerts
    dashboard_url: str = "http://127.0.0.1:8501"  # ROUTERSCOPE_DASHBOARD_URL: the base of the Explorer links
    exporter_port: int | None = None  # ROUTERSCOPE_EXPORTER_PORT: the Dagster deployment serves the exporter there
    # (share of the disk, bytes): the free space a load keeps on an embedded warehouse's disk (the smaller)
    warehouse_min_free: tuple[float | None, int | None] = parse_min_free(DEFAULT_MIN_FREE)
    # OTLP in (docs/otlp.md): the topic `routerscope collect` and a Collector's Kafka exporter write, and the
    # user's mapping file (None: the defaults shipped in routerscope/instrumentation/otlp/default_mapping.yaml)
    otlp_topic: str = names.TOPIC_OTLP
    otlp_mapping: Path | None = None
    # seconds between the emitter spool's fsyncs (ROUTERSCOPE_SPOOL_FSYNC_INTERVAL_S; 0: every append)
    spool_fsync_interval_s: float = DEFAULT_SPOOL_FSYNC_INTERVAL_S

    @classmethod
    def from_env(cls, env: dict | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        home = Path(env.get("ROUTERSCOPE_HOME") or ".routerscope").expanduser().resolve()
        dsn = env.get("ROUTERSCOPE_CLICKHOUSE_DSN") or f"chdb://{home / 'warehouse'}"
        protocol = (env.get("ROUTERSCOPE_KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT").upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"ROUTERSCOPE_KAFKA_SECURITY_PROTOCOL={protocol!r}: use one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        security = KafkaSecurity(
            protocol=protocol,
            sasl_mechanism=env.get("ROUTERSCOPE_KAFKA_SASL_MECHANISM") or "PLAIN",
            sasl_username=env.get("ROUTERSCOPE_KAFKA_SASL_USERNAME") or None,
            sasl_password=env.get("ROUTERSCOPE_KAFKA_SASL_PASSWORD") or None,
            ssl_cafile=env.get("ROUTERSCOPE_KAFKA_SSL_CAFILE") or None,
        )
        return cls(
            home=home,
            kafka_bootstrap_env=env.get("ROUTERSCOPE_KAFKA_BOOTSTRAP") or None,
            warehouse=WarehouseDsn.parse(dsn),
            kafka_security=security,
            topic_partitions=_int_env(env, "ROUTERSCOPE_TOPIC_PARTITIONS", 3),
            alert_webhook=_http_url(
                "ROUTERSCOPE_ALERT_WEBHOOK",
                env.get("ROUTERSCOPE_ALERT_WEBHOOK") or None,
                "https://hooks.slack.com/services/…",
                strip=False,
            ),
            alert_rules=Path(env["ROUTERSCOPE_ALERT_RULES"]).expanduser().resolve()
            if env.get("ROUTERSCOPE_ALERT_RULES")
            else None,
            warehouse_min_free=parse_min_free(env.get("ROUTERSCOPE_WAREHOUSE_MIN_FREE") or DEFAULT_MIN_FREE),
            alertmanager_url=_http_url("ROUTERSCOPE_ALERTMANAGER_URL", env.get("ROUTERSCOPE_ALERTMANAGER_URL") or None),
            dashboard_url=_http_url("ROUTERSCOPE_DASHBOARD_URL", env.get("ROUTERSCOPE_DASHBOARD_URL") or None)
            or "http://127.0.0.1:8501",
            exporter_port=_port_env(env, "ROUTERSCOPE_EXPORTER_PORT"),
            otlp_topic=_topic_env(env, "ROUTERSCOPE_OTLP_TOPIC", names.TOPIC_OTLP),
            otlp_mapping=Path(env["ROUTERSCOPE_OTLP_MAPPING"]).expanduser().resolve()
            if env.get("ROUTERSCOPE_OTLP_MAPPING")
            else None,
            spool_fsync_interval_s=spool_fsync_interval(env),
        )

    # -- every path under the home, named once -------------------------------------------------------
    @property
    def broker_record_path(self) -> Path:
        """Where the local broker records its address (`routerscope broker start`)."""
        return self.home / BROKER_RECORD

    @property
    def broker_pid_path(self) -> Path:
        return self.home / "broker.pid"

    @property
    def broker_log_path(self) -> Path:
        return self.home / "broker.log"

    @property
    def broker_binary_path(self) -> Path:
        """The copy of the Tansu binary the local broker runs."""
        return self.home / "bin" / "tansu"

    @property
    def spool_path(self) -> Path:
        """Where an emitter keeps the events a broker outage left undelivered (replayed on reconnect)."""
        return self.home / "spool"

    @property
    def request_texts_path(self) -> Path:
        """The request-text store (opt-in texts for the replay, divergence samples)."""
        return self.home / names.REQUEST_TEXTS

    def exporter_lease_path(self, port: int) -> Path:
        """The lease the Dagster deployment renews while it wants the exporter on `port`
        (`routerscope.pipelines.exporter`)."""
        return self.home / f"exporter-{port}.lease"

    @property
    def exporter_log_path(self) -> Path:
        return self.home / "exporter.log"

    @property
    def dashboard_log_path(self) -> Path:
        return self.home / "dashboard.log"

    @property
    def model_worker_log_path(self) -> Path:
        return self.home / "model-worker.log"

    @property
    def standin_cloud_log_path(self) -> Path:
        return self.home / "standin-cloud.log"

    @property
    def demo_span_path(self) -> Path:
        """Where the last completed demo's simulated span ended (the next demo continues after it)."""
        return self.home / "demo-span.json"

    @property
    def doctor_path(self) -> Path:
        """Where `routerscope doctor --repair` moves the parts it sets aside."""
        return self.home / "doctor"

    def recorded_bootstrap(self) -> str | None:
        """The address the local broker of this home recorded, if any."""
        try:
            return json.loads(self.broker_record_path.read_text())["bootstrap"]
        except (FileNotFoundError, KeyError, ValueError):
            return None

    def kafka_bootstrap(self) -> str:
        """Where Kafka is: the env var wins, else the local broker recorded under the home."""
        if self.kafka_bootstrap_env:
            return self.kafka_bootstrap_env
        recorded = self.recorded_bootstrap()
        if recorded:
            return recorded
        raise ConfigError(
            f"no Kafka broker configured: run `routerscope broker start` (home {self.home}) "
            "or set ROUTERSCOPE_KAFKA_BOOTSTRAP=host:port"
        )
