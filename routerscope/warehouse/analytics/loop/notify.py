"""Policy events to the alert channels (docs/loop.md#alert-channels): every transition of the loop goes to the
webhook (ROUTERSCOPE_ALERT_WEBHOOK, a Slack-compatible body) and to Alertmanager (ROUTERSCOPE_ALERTMANAGER_URL,
its API v2) with its evidence: the states, the reason, who, the figure it stood on with its interval and n, and
the evidence file with its SHA-256. Best effort: a channel that does not answer never stops a transition (the
event is on Kafka and in the warehouse whatever happens); what each channel answered is kept beside the
transition file (`transitions/NNNN.notified.json`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from routerscope.core.timeutil import utc, utc_iso
from routerscope.warehouse.analytics.alerting.delivery import post_json

ALERTNAME = "routerscope_policy_transition"
SEVERITY = {"halted": "page", "rolled_back": "page", "held": "ticket", "full": "info"}
NOTICE = timedelta(hours=1)  # a transition is a notice, not a condition: Alertmanager lets it end by itself


def _figure(event: dict) -> str:
    if event.get("estimate") is None:
        return "no figure"
    low, high = event.get("ci_low"), event.get("ci_high")
    ci = f" [{low * 100:+.2f}, {high * 100:+.2f}]" if low is not None and high is not None else ""
    return f"Δ {event.get('metric')} {event['estimate'] * 100:+.2f} pts{ci}, n={event.get('n')}"


def summary(event: dict) -> str:
    return (
        f"routerscope loop: {event['task_type']} {event['policy_id']} {event['from_state'] or '—'} → "
        f"{event['to_state']} ({event['reason']}, by {event['actor']})"
    )


def webhook_body(event: dict) -> dict:
    return {
        "text": summary(event),
        "attachments": [
            {
                "color": {"page": "danger", "ticket": "warning"}.get(SEVERITY.get(event["to_state"], ""), "good"),
                "fields": [
                    {"title": "figure", "value": _figure(event), "short": False},
                    {"title": "evidence", "value": f"{event['evidence_file']} sha256 {event['evidence_hash']}"},
                    {"title": "explain", "value": f"routerscope loop explain {event['policy_id']}"},
                ],
            }
        ],
        "policy_event": event,
    }


def alertmanager_body(event: dict, dashboard_url: str, now: datetime | None = None) -> list[dict]:
    start = utc(datetime.fromisoformat(event["event_time"].replace("Z", "+00:00")))
    return [
        {
            "labels": {
                "alertname": ALERTNAME,
                "severity": SEVERITY.get(event["to_state"], "info"),
                "task_type": event["task_type"],
                "policy_id": event["policy_id"],
                "to_state": event["to_state"],
                "reason": event["reason"],
            },
            "annotations": {
                "summary": summary(event),
                "description": _figure(event),
                "evidence": f"{event['evidence_file']} sha256 {event['evidence_hash']}",
                "actor": event["actor"],
            },
            "startsAt": utc_iso(start, "auto"),
            "endsAt": utc_iso(max(start, now or start) + NOTICE, "auto"),
            "generatorURL": f"{dashboard_url.rstrip('/')}/loop?policy_id={event['policy_id']}",
        }
    ]


def notify(settings, event: dict, *, retries: int = 3, backoff_s: float = 0.5, timeout_s: float = 5.0) -> dict:
    """Send `event` to every configured channel; {channel: [(status, error) per attempt]}."""
    out: dict = {}
    if settings.alert_webhook:
        out["webhook"] = post_json(
            settings.alert_webhook, webhook_body(event), retries=retries, backoff_s=backoff_s, timeout_s=timeout_s
        )
    if settings.alertmanager_url:
        out["alertmanager"] = post_json(
            f"{settings.alertmanager_url.rstrip('/')}/api/v2/alerts",
            alertmanager_body(event, settings.dashboard_url),
            retries=retries,
            backoff_s=backoff_s,
            timeout_s=timeout_s,
        )
    return out


class Notifying:
    """A publisher that, once the event is published, also sends it to the alert channels and keeps what they
    answered in `transitions/NNNN.notified.json` of `directory` (the candidate's)."""

    def __init__(self, publish: Callable[[dict], None], settings, directory: Path | None = None, **options):
        self.publish, self.settings, self.directory, self.options = publish, settings, directory, options

    def __call__(self, event: dict) -> None:
        self.publish(event)  # raises: not published, not notified
        try:
            answers = notify(self.settings, event, **self.options)
        except Exception as exc:  # a channel's fault never stops a transition
            answers = {"error": repr(exc)}
        if self.directory is not None and answers:
            path = Path(self.directory) / "transitions" / f"{event['seq']:04d}.notified.json"
            path.write_text(json.dumps(answers, default=str))
