"""Alerting: rules over the stored metric windows and pipeline signals, a lifecycle, webhook delivery.

* `rules`: the rules as data (`alert_rules.yaml` here, or ROUTERSCOPE_ALERT_RULES) and their validation;
* `evaluate`: the pure part — a rule's consecutive-window streak and the episode transitions;
* `engine.run`: one evaluation against the warehouse (storage: `routerscope.warehouse.queries.alerts`);
* `delivery`: the Slack-compatible body and the webhook POST with retries; Alertmanager's API v2;
* `prometheus`: the rules as a Prometheus rule file (`routerscope rules export`).

Episodes are stored in `alerts` with the windows and values that tripped them and the rule file's
version; every delivery attempt in `alert_deliveries`."""

from routerscope.warehouse.analytics.alerting.delivery import (
    AlertmanagerNotifier,
    Notifier,
    WebhookNotifier,
    alertmanager_alert,
    notifier_for,
    post_webhook,
    slack_body,
)
from routerscope.warehouse.analytics.alerting.engine import pipeline_signal, read, rules_for_evaluation, run
from routerscope.warehouse.analytics.alerting.evaluate import Alert, BreachStreak, Evaluation, Point, evaluate
from routerscope.warehouse.analytics.alerting.rules import DEFAULT_RULES, Rule, load_rules

__all__ = [
    "DEFAULT_RULES",
    "Alert",
    "AlertmanagerNotifier",
    "BreachStreak",
    "Evaluation",
    "Notifier",
    "Point",
    "Rule",
    "WebhookNotifier",
    "alertmanager_alert",
    "evaluate",
    "load_rules",
    "notifier_for",
    "pipeline_signal",
    "post_webhook",
    "read",
    "rules_for_evaluation",
    "run",
    "slack_body",
]
