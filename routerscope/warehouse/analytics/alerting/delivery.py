"""Notifications: a Slack-compatible JSON body, POSTed with retries and exponential backoff; and, with
ROUTERSCOPE_ALERTMANAGER_URL, the same episodes posted to Alertmanager's `/api/v2/alerts` (beside the webhook
when both are set).

Every attempt comes back as a row for `alert_deliveries`; an alert that never got through stays
pending and is retried at the next evaluation, so a delivery failure never loses an alert. The
Dagster jobs deliver through `routerscope.pipelines.resources.AlertWebhookResource`; the command line, which
does not import Dagster, through `WebhookNotifier`: both POST with `post_webhook`."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from urllib.parse import urlencode

from routerscope.core.timeutil import UTC, utc, utc_iso
from routerscope.warehouse.analytics.alerting.evaluate import Alert

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


def _value_n(window: dict) -> str:
    """`_value` with the events behind it when the rule counts them (`0.4 (n=100)`); a signal without a count
    (a breaker, the ingest lag) reads as its value alone, never `n=None`."""
    if not window:
        return "—"
    n = window.get("n")
    return _value(window) + (f" (n={n})" if n is not None else "")


def sentence(trip: dict) -> str:
    """What tripped an episode, as a sentence: `fallback_rate was 0.4 over 100 events in the window from
    2026-12-07 12:00 UTC (limit: > 0.3), 3 windows in a row.` — its n when it has one."""
    windows = trip.get("windows") or []
    latest = windows[-1] if windows else {}
    metric, op, limit = trip.get("metric"), trip.get("op"), trip.get("limit")
    if not latest:
        return f"{metric} {op} {limit}."
    text = f"{metric} was {_value(latest)}"
    if latest.get("n") is not None:
        text += f" over {latest['n']} events"
    start = latest.get("start")
    if start:
        text += f" in the window from {str(start).replace('T', ' ').removesuffix('Z')[:16]} UTC"
    text += f" (limit: {op} {limit})"
    if len(windows) > 1:
        text += f", {len(windows)} windows in a row"
    return text + "."


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
                    {"title": "latest value", "value": _value_n(latest), "short": True},
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
    """POST the alert, retrying with exponential backoff (`post_json`). Returns (delivered?, attempt rows)."""
    event = "firing" if alert.status == "firing" else "resolved"
    tries = post_json(url, slack_body(alert), retries=retries, backoff_s=backoff_s, timeout_s=timeout_s)
    attempts = [
        [alert.alert_key, alert.first_seen, event, i, status, error] for i, (status, error) in enumerate(tries, 1)
    ]
    status = tries[-1][0] if tries else None
    return status is not None and 200 <= status < 300, attempts


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
        if not self.url:  # not configured (`configured()`): nothing sent, nothing tried
            return False, []
        return post_webhook(self.url, alert, retries=self.retries, backoff_s=self.backoff_s, timeout_s=self.timeout_s)


# Alertmanager: a client re-sends a firing alert while it fires, each time with an `endsAt` ahead, and
# Alertmanager resolves it by itself once that passes without a re-send (Prometheus sends endsAt = now + 4 ×
# its resend delay). routerscope re-sends at every evaluation (at least one per 5-minute window), so 4 of them:
ALERTMANAGER_HOLD = timedelta(minutes=20)


def explorer_link(dashboard_url: str, alert: Alert) -> str:
    """The dashboard's Explorer on the episode's decisions: its span, its task type (the On-call page's link)."""
    end = alert.resolved_at or alert.last_seen or alert.first_seen
    params = {"range": "custom", "start": utc_iso(alert.first_seen, "auto"), "end": utc_iso(end, "auto")}
    if alert.task_type:
        params["task_type"] = alert.task_type
    params["incident"] = alert.alert_key
    return f"{dashboard_url.rstrip('/')}/explorer?{urlencode(params)}"


EPISODE_LABEL = "routerscope_episode"  # the episode's start: two episodes of one rule are two alerts


def alertmanager_alert(alert: Alert, dashboard_url: str, now: datetime | None = None) -> dict[str, Any]:
    """One alert of Alertmanager's API v2 body. The labels are the exported Prometheus rules' own
    (`alerting.prometheus`) plus the episode's start (EPISODE_LABEL): Alertmanager tells alerts apart by their
    labels alone, and without it the episodes of one rule and scope collapsed into one alert whenever they came
    within one group interval (a replay, a flapping signal)."""
    trip = json.loads(alert.trip_values)
    latest = trip["windows"][-1] if trip.get("windows") else {}
    labels = {
        "alertname": alert.rule,
        "severity": alert.severity,
        "routerscope_rule_version": alert.rule_version,
        EPISODE_LABEL: utc_iso(alert.first_seen, "auto"),
    }
    if alert.task_type:
        labels["task_type"] = alert.task_type
    if alert.action:
        labels["action"] = alert.action
    link = explorer_link(dashboard_url, alert)
    body: dict[str, Any] = {
        "labels": labels,
        "annotations": {
            "summary": alert.summary,
            "description": sentence(trip),
            "value": _value_n(latest),
            "explorer": link,
        },
        "startsAt": utc_iso(alert.first_seen, "auto"),
        "generatorURL": link,
    }
    if alert.status == "resolved":
        body["endsAt"] = utc_iso(alert.resolved_at or alert.last_seen, "auto")
    else:  # ahead of the wall clock, not the evaluation's time: a replayed evaluation still holds it firing
        body["endsAt"] = utc_iso(max(now or datetime.now(UTC), datetime.now(UTC)) + ALERTMANAGER_HOLD, "auto")
    return body


def post_json(
    url: str,
    payload,
    *,
    retries: int = DEFAULT_RETRIES,
    backoff_s: float = DEFAULT_BACKOFF_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[tuple[int | None, str]]:
    """POST `payload` as JSON with retries and exponential backoff: (status, error) per attempt, the last one
    a 2xx when it got through."""
    body = json.dumps(payload).encode()
    attempts: list[tuple[int | None, str]] = []
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
        attempts.append((status, error))
        if status is not None and 200 <= status < 300:
            break
        if attempt < retries:
            time.sleep(backoff_s * 2 ** (attempt - 1))
    return attempts


@dataclass(frozen=True)
class AlertmanagerNotifier:
    """Alertmanager's API (`url`: its base, e.g. http://alertmanager:9093), and the webhook beside it when one
    is configured. An episode counts as delivered once every destination took it; until then it stays pending
    and is sent again (Alertmanager de-duplicates by labels; a webhook that took it may see it twice)."""

    url: str
    dashboard_url: str = "http://127.0.0.1:8501"
    webhook: WebhookNotifier | None = None
    retries: int = DEFAULT_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def endpoint(self) -> str:
        return f"{self.url.rstrip('/')}/api/v2/alerts"

    def configured(self) -> bool:
        return True

    def _post(self, alerts: list[Alert]) -> list[tuple[int | None, str]]:
        body = [alertmanager_alert(a, self.dashboard_url) for a in alerts]
        return post_json(self.endpoint, body, retries=self.retries, backoff_s=self.backoff_s, timeout_s=self.timeout_s)

    def deliver(self, alert: Alert) -> tuple[bool, list[list]]:
        event = "firing" if alert.status == "firing" else "resolved"
        tried = self._post([alert])
        rows = [[alert.alert_key, alert.first_seen, event, i, s, e] for i, (s, e) in enumerate(tried, start=1)]
        ok = tried[-1][0] is not None and 200 <= tried[-1][0] < 300
        if self.webhook is not None and self.webhook.configured():
            hooked, more = self.webhook.deliver(alert)
            ok, rows = ok and hooked, rows + more
        return ok, rows

    def refresh(self, firing: list[Alert]) -> bool:
        """Re-send the episodes still firing (already delivered) with a fresh `endsAt`, as Alertmanager
        expects of a client; nothing is recorded (a miss is made good at the next evaluation)."""
        if not firing:
            return True
        status = self._post(firing)[-1][0]
        return status is not None and 200 <= status < 300


def notifier_for(settings) -> Notifier:
    """Where a command's alerts go: Alertmanager (with the webhook beside it) when ROUTERSCOPE_ALERTMANAGER_URL
    is set, else the webhook of ROUTERSCOPE_ALERT_WEBHOOK (or nowhere)."""
    webhook = WebhookNotifier(settings.alert_webhook)
    if settings.alertmanager_url:
        return AlertmanagerNotifier(settings.alertmanager_url, settings.dashboard_url, webhook)
    return webhook
