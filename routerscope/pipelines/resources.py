"""Dagster resources: the project's settings, so every asset reads the same configuration as the CLI;
the alert webhook."""

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg

from routerscope.core.settings import Settings
from routerscope.pipelines.core import unit_of_work
from routerscope.warehouse.analytics.alerting.delivery import (
    DEFAULT_BACKOFF_S,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    AlertmanagerNotifier,
    WebhookNotifier,
)


class RouterscopeResource(dg.ConfigurableResource):
    """Where the broker and the warehouse are. Unset fields fall back to the environment
    (`ROUTERSCOPE_HOME`, `ROUTERSCOPE_KAFKA_BOOTSTRAP`, `ROUTERSCOPE_CLICKHOUSE_DSN`, … — docs/architecture.md §6)."""

    home: str | None = None
    kafka_bootstrap: str | None = None
    clickhouse_dsn: str | None = None
    alert_rules: str | None = None  # a rules file (ROUTERSCOPE_ALERT_RULES); None: the environment's, or the defaults

    @classmethod
    def for_settings(cls, settings: Settings) -> "RouterscopeResource":
        """The resource that points where `settings` points (for runs launched from Python)."""
        return cls(
            home=str(settings.home),
            kafka_bootstrap=settings.kafka_bootstrap(),
            clickhouse_dsn=settings.warehouse.raw,
            alert_rules=str(settings.alert_rules) if settings.alert_rules else None,
        )

    def settings(self) -> Settings:
        env = dict(os.environ)
        for name, value in (
            ("ROUTERSCOPE_HOME", self.home),
            ("ROUTERSCOPE_KAFKA_BOOTSTRAP", self.kafka_bootstrap),
            ("ROUTERSCOPE_CLICKHOUSE_DSN", self.clickhouse_dsn),
            ("ROUTERSCOPE_ALERT_RULES", self.alert_rules),
        ):
            if value:
                env[name] = value
        return Settings.from_env(env)

    @contextmanager
    def warehouse(self, purpose: str, timeout_s: float | None = None) -> Iterator[Any]:
        """The warehouse client for one unit of work, opened (embedded: locked) and migrated; closed after.
        Every asset and sensor opens the warehouse through this one door."""
        with unit_of_work(self.settings(), purpose, timeout_s) as client:
            yield client


class AlertDelivery(dg.ConfigurableResource, ABC):
    """Where the alerts job delivers notifications (`routerscope.warehouse.analytics.alerting.Notifier`): the webhook
    in a
    deployment, a recording fake in tests (`tests.fakes.FakeWebhook`)."""

    @abstractmethod
    def configured(self) -> bool:
        """False: nowhere to deliver (alerts are stored and marked `no_webhook`)."""

    @abstractmethod
    def deliver(self, alert) -> tuple[bool, list[list]]:
        """Deliver one `routerscope.warehouse.analytics.alerting.Alert`: (delivered?, one `alert_deliveries` row per
        attempt)."""


class AlertWebhookResource(AlertDelivery):
    """The Slack-compatible webhook, POSTed with retries and exponential backoff.

    `url` unset: ROUTERSCOPE_ALERT_WEBHOOK at run time, read like the CLI's settings (unset there too:
    alerts are stored, not delivered). Not `dg.EnvVar` in the definitions: Dagster rejects the config
    of every run when an EnvVar's variable is unset, and unset is the ordinary case. A deployment that
    always sets it may bind `AlertWebhookResource(url=dg.EnvVar("ROUTERSCOPE_ALERT_WEBHOOK"))`."""

    url: str | None = None
    retries: int = DEFAULT_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S
    timeout_s: float = DEFAULT_TIMEOUT_S

    def notifier(self) -> WebhookNotifier | AlertmanagerNotifier:
        """The webhook; with ROUTERSCOPE_ALERTMANAGER_URL set, Alertmanager with the webhook beside it."""
        settings = Settings.from_env()
        webhook = WebhookNotifier(self.url or settings.alert_webhook, self.retries, self.backoff_s, self.timeout_s)
        if settings.alertmanager_url:
            return AlertmanagerNotifier(
                settings.alertmanager_url, settings.dashboard_url, webhook, self.retries, self.backoff_s, self.timeout_s
            )
        return webhook

    def configured(self) -> bool:
        return self.notifier().configured()

    def deliver(self, alert) -> tuple[bool, list[list]]:
        return self.notifier().deliver(alert)

    def refresh(self, firing: list) -> bool:
        """Alertmanager only: re-send what still fires (see `AlertmanagerNotifier.refresh`)."""
        notifier = self.notifier()
        return notifier.refresh(firing) if isinstance(notifier, AlertmanagerNotifier) else True
