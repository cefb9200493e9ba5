"""Fakes for tests: stand-ins where a real part adds nothing to what a test proves."""

from __future__ import annotations

from typing import Any, ClassVar

from pipelines.resources import AlertDelivery
from warehouse.alerting import slack_body


class FakeWebhook(AlertDelivery):
    """An alert webhook that records each delivery (the Slack-compatible body it would have POSTed)
    instead of sending it; the first `failures` deliveries fail as a webhook answering 500 would.

    Dagster builds its own copy of a resource for each run, so the record is kept per `key` on the
    class: a test reads `FakeWebhook(key=...).deliveries` with the key it gave the run's resource."""

    key: str = "default"
    failures: int = 0
    _log: ClassVar[dict[str, list[dict[str, Any]]]] = {}

    def configured(self) -> bool:
        return True

    @property
    def deliveries(self) -> list[dict[str, Any]]:
        """Every delivery in order: alert_key, event (firing | resolved), body, delivered."""
        return self._log.setdefault(self.key, [])

    def deliver(self, alert) -> tuple[bool, list[list]]:
        ok = len(self.deliveries) >= self.failures
        event = "firing" if alert.status == "firing" else "resolved"
        self.deliveries.append(
            {"alert_key": alert.alert_key, "event": event, "body": slack_body(alert), "delivered": ok}
        )
        return ok, [[alert.alert_key, alert.first_seen, event, 1, 200 if ok else 500, "" if ok else "HTTP 500"]]
