"""Notifications: a Slack-compatible JSON body, POSTed with retries and exponential backoff.

Every attempt comes back as a row for `alert_deliveries`; an alert that never got through stays
pending and is retried at the next evaluation, so a delivery failure never loses an alert. The
Dagster jobs deliver through `pipelines.resources.AlertWebhookResource`; the command line, which
does not import Dagster, through `WebhookNotifier`: both POST with `post_webhook`."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol

from routerscope.core.timeutil import utc
from warehouse.analytics.alerting.evaluate import Alert

DEFAULT_RETRIES = 3
DEFAULT_BACKOFF_S = 0.5  # before the 2nd attempt; doubled before each further one
DEFAULT_TIMEOUT_S = 5.0


class Notifier(Protocol):
    """Where notifications go. `configured()` False: nowhere (alerts are stored, marked `no_webhook`)."""

    def configured(self) -> bool: ...

    def deliver(self, alert: Alert) -> tuple[bool, list[list]]:
        """Deliver one alert: (delivered?, one `alert_deliveries` row per attempt)."""
        ...


def _value(window: dict) -> str:
    """A tripping window's value, with its 95 % interval when the rule asked for one: `0.4 [0.27, 0.55]`."""
    value, interval = window.get("value"), window.get("interval")
    text = f"{value:.3g}" if isinstance(value, float) else str(value)
    return text + (f" [{interval[0]:.3g}, {interval[1]:.3g}]" if interval else "")


def slack_body(alert: Alert) -> dict[str, Any]:
    """A Slack-compatible incoming-webhook body (also fine for most chat and paging webhooks)."""
    firing = alert.status == "firing"
    scope = alert.task_type or "overall"
    head = f"{'FIRING' if firing else 'RESOLVED'} [{alert.severity}] {alert.summary} ({scope})"
    trip = json.loads(alert.trip_values)
    latest = trip["windows"][-1] if trip.get("windows") else {}
    if alert.action == "rollback" and firing:
        head += f" — ROLLBACK RECOMMENDED for {scope}: {trip.get('metric')} {_value(latest)}"
    return {
        "text": head,
        "attachments": [
            {
                "color": "danger" if firing else "good",
                "fields": [
                    {"title": "rule", "value": f"{alert.rule} (rules {alert.rule_version})", "short": True},
                    {
                        "title": "condition",
                        "value": f"{trip.get('metric')} {trip.get('op')} {trip.get('limit')}",
                        "short": True,
                    },
                    {"title": "latest value", "value": f"{_value(latest)} (n={latest.get('n')})", "short": True},
                    {"title": "since", "value": utc(alert.first_seen).isoformat(), "short": True},
                ],
            }
        ],
    }


def post_webhook(
    url: str,
    alert: Alert,
    *,
    retries: int = DEFAULT_RETRIES,
    backoff_s: float = DEFAULT_BACKOFF_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> tuple[bool, list[list]]:
    """POST the alert, retrying with exponential backoff. Returns (delivered?, attempt rows)."""
    body = json.dumps(slack_body(alert)).encode()
    event = "firing" if alert.status == "firing" else "resolved"
    attempts = []
    for attempt in range(1, retries + 1):
        status, error = None, ""
        try:
            request = urllib.request.Request(
                url, data=body, headers={"Content-Type": "application/json"}, method="POST"
            )
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            status, error = exc.code, f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            error = str(getattr(exc, "reason", exc))[:300]
        attempts.append([alert.alert_key, alert.first_seen, event, attempt, status, error])
        if status is not None and 200 <= status < 300:
            return True, attempts
        if attempt < retries:
            time.sleep(backoff_s * 2 ** (attempt - 1))
    return False, attempts


@dataclass(frozen=True)
class WebhookNotifier:
    """A webhook URL (None: not configured) and how hard to try."""

    url: str | None
    retries: int = DEFAULT_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S
    timeout_s: float = DEFAULT_TIMEOUT_S

    def configured(self) -> bool:
        return bool(self.url)

    def deliver(self, alert: Alert) -> tuple[bool, list[list]]:
        return post_webhook(self.url, alert, retries=self.retries, backoff_s=self.backoff_s, timeout_s=self.timeout_s)
