"""An alert episode named by its evidence: what moved in the episode's windows against the same length of time
before it (the baseline), the cause that evidence points at, the next step (a runbook section per rule,
docs/runbook.md), and the Explorer filter that shows the decisions behind it.

Causes, in the order they are tried (docs/runbook.md#how-an-incident-is-named):
* **cloud outage**: the cloud breaker opened in the episode, or canned answers (L4) or cloud-unavailable fallbacks
  reached 5 % of the requests and at least three times their baseline share (when a device slowdown shows too, the
  rule decides: a breaker or degrade-trigger rule is the cloud's);
* **device slow (thermal?)**: device timeouts at least doubled their baseline share (and reached 3 %), or the share
  of requests on a throttled device (thermal state serious or critical) did; the device breaker's openings beside;
* **after push <version>**: a policy version that the baseline never saw served the episode's requests;
* otherwise the rule's own words, and the fallback reason that grew most.

`evidence` and `evidence_many` read (four queries over a batch of episodes and their baselines); `name` is pure
(tested without a warehouse)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from routerscope.warehouse.sql import dict_rows, named, utc_or_none, utc_text

BASELINE_MIN = timedelta(minutes=30)
BASELINE_MAX = timedelta(hours=2)
RUNBOOK = "docs/runbook.md"
# a section of docs/runbook.md per rule (its anchor), and per cause
RUNBOOK_SECTIONS = {
    "cloud outage": "cloud-outage",
    "device slow (thermal?)": "device-slow-thermal",
    "push": "after-a-policy-push",
    "fallback_rate_high": "fallback-rate-high",
    "l2_l3_drift": "l2l3-share-drifting",
    "device_bypass": "device-bypassed",
    "device_breaker_open": "device-breaker-open",
    "cloud_breaker_open": "cloud-outage",
    "false_fallback_high": "false-fallbacks-high",
    "rollback_route_accuracy": "rollback-recommended",
    "rollback_offload_failure": "rollback-recommended",
    "rollback_degrade_trigger": "rollback-recommended",
    "ingest_stale": "ingest-stale",
    "quarantine_share_high": "quarantine-share-high",
    "data_quality_blocking": "blocking-data-quality-failure",
}
NEXT_STEPS = {
    "cloud outage": "check the cloud provider's status and the cloud breaker; no rollback: an outage moves no rollback"
    " signal",
    "device slow (thermal?)": "check the devices' thermal state and load before any threshold: a hot or busy device "
    "times out whatever the threshold",
    "push": "compare the push before and after on Weekly tuning; roll the threshold back if the what-if confirms",
}

# Each query reads a batch of episodes at once (On-call names every incident of its range: seven episodes made 28
# queries, 0.5 s of a cold page): episode i is its task type ('' = every one), start, end and baseline start in the
# arrays below, and a decision counts for every episode whose span holds it.
_EPISODES = """
    {tasks:Array(String)} AS tasks, {starts:Array(DateTime64(3, 'UTC'))} AS starts,
    {ends:Array(DateTime64(3, 'UTC'))} AS ends, {baselines:Array(DateTime64(3, 'UTC'))} AS baselines"""
_IN_EPISODE = """event_time >= {lo:DateTime64(3, 'UTC')} AND event_time < {hi:DateTime64(3, 'UTC')}
  AND event_time >= baselines[i] AND event_time < ends[i]
  AND mode = 'live' AND (tasks[i] = '' OR task_type = tasks[i])"""
EPISODE_SQL = named(
    "alert_episode_evidence",
    """
WITH $episodes
SELECT
    i,
    event_time >= starts[i] AS during,
    count() AS requests,
    countIf(entered_device) AS entered,
    countIf(entered_device AND fallback_type != 'none') AS fallbacks,
    countIf(reason = 'device_timeout') AS timeouts,
    countIf(reason = 'cloud_unavailable') AS cloud_unavailable,
    countIf(degrade_level = 4) AS canned,
    countIf(device_thermal_state IN ('serious', 'critical')) AS throttled,
    quantileIf(0.9)(ttft_ms, ttft_ms IS NOT NULL) AS ttft_p90,
    groupUniqArray(policy_version) AS versions
FROM $decisions
ARRAY JOIN arrayEnumerate(tasks) AS i
WHERE $in_episode
GROUP BY i, during
""",
    {"episodes": _EPISODES, "in_episode": _IN_EPISODE},
)
REASONS_SQL = named(
    "alert_episode_reasons",
    """
WITH $episodes
SELECT i, reason,
       countIf(event_time >= starts[i]) AS during,
       countIf(event_time < starts[i]) AS before,
       minIf(event_time, event_time >= starts[i]) AS first_during
FROM $decisions
ARRAY JOIN arrayEnumerate(tasks) AS i
WHERE $in_episode AND fallback_type != 'none'
GROUP BY i, reason
ORDER BY i, reason
""",
    {"episodes": _EPISODES, "in_episode": _IN_EPISODE},
)
VERSIONS_SQL = named(
    "alert_episode_versions",
    """
WITH $episodes
SELECT i, policy_version, min(event_time) AS first_seen
FROM $decisions
ARRAY JOIN arrayEnumerate(tasks) AS i
WHERE $in_episode
GROUP BY i, policy_version
ORDER BY i, first_seen, policy_version
""",
    {"episodes": _EPISODES, "in_episode": _IN_EPISODE},
)
BREAKER_SQL = named(
    "alert_episode_breakers",
    """
WITH $episodes
SELECT i, boundary, countIf(to_state = 'open') AS opened
FROM $breaker_events FINAL
ARRAY JOIN arrayEnumerate(tasks) AS i
WHERE event_time >= {lo:DateTime64(3, 'UTC')} AND event_time < {hi:DateTime64(3, 'UTC')}
  AND event_time >= starts[i] AND event_time < ends[i]
GROUP BY i, boundary
ORDER BY i, boundary
""",
    {"episodes": _EPISODES},
)


@dataclass
class Evidence:
    """What one scope's decisions did in the episode (`during`) and in the baseline before it (`before`)."""

    during: dict[str, Any] = field(default_factory=dict)
    before: dict[str, Any] = field(default_factory=dict)
    reasons: list[dict[str, Any]] = field(default_factory=list)  # fallback reasons: during, before
    # policy version -> first decision in the range (None: a time the warehouse read back as unset)
    versions: dict[str, datetime | None] = field(default_factory=dict)
    breaker_opened: dict[str, int] = field(default_factory=dict)  # boundary -> openings in the episode
    baseline_start: datetime | None = None
    start: datetime | None = None


def baseline_start(start: datetime, end: datetime) -> datetime:
    length = min(max(end - start, BASELINE_MIN), BASELINE_MAX)
    return start - length


def evidence(client, task_type: str, start: datetime, end: datetime) -> Evidence:
    """The evidence of an episode of `task_type` ('' = every task type) over [start, end)."""
    return evidence_many(client, [(task_type, start, end)])[0]


def evidence_many(client, episodes: Sequence[tuple[str, datetime, datetime]]) -> list[Evidence]:
    """The evidence of each (task type, start, end) episode, in order: four queries whatever their number."""
    if not episodes:
        return []
    bases = [baseline_start(start, end) for _, start, end in episodes]
    params = {
        "tasks": [task for task, _, _ in episodes],
        "starts": [utc_text(start) for _, start, _ in episodes],
        "ends": [utc_text(end) for _, _, end in episodes],
        "baselines": [utc_text(b) for b in bases],
        "lo": utc_text(min(bases)),
        "hi": utc_text(max(end for _, _, end in episodes)),
    }
    out = [Evidence(baseline_start=b, start=start) for b, (_, start, _) in zip(bases, episodes)]
    for row in dict_rows(client, EPISODE_SQL, params):
        one = out[int(row.pop("i")) - 1]
        (one.during if row.pop("during") else one.before).update(row)
    for row in dict_rows(client, REASONS_SQL, params):
        out[int(row.pop("i")) - 1].reasons.append(row)
    for row in dict_rows(client, VERSIONS_SQL, params):
        out[int(row["i"]) - 1].versions[str(row["policy_version"])] = utc_or_none(row["first_seen"])
    for row in dict_rows(client, BREAKER_SQL, params):
        if row["opened"]:
            out[int(row["i"]) - 1].breaker_opened[str(row["boundary"])] = int(row["opened"])
    return out


def _share(block: dict, key: str) -> float | None:
    n = block.get("requests") or 0
    return (block.get(key) or 0) / n if n else None


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


@dataclass(frozen=True)
class Named:
    """An episode named by its evidence."""

    cause: str  # 'cloud outage', 'device slow (thermal?)', 'after push v…', or the rule in words
    moved: list[str]  # what moved, each with its value and baseline
    next_step: str
    runbook: str  # docs/runbook.md#section
    explorer: dict[str, str]  # the Explorer's filters for the decisions behind it (reason, policy version)


def moved_line(what: str, during: float | None, before: float | None, n: int) -> str:
    return f"{what} {_pct(during)} of {n:,} requests (baseline {_pct(before)})"


def name(rule: str, ev: Evidence, rule_words: str = "") -> Named:
    """The cause the evidence points at, what moved, the next step and the Explorer's filter."""
    during, before = ev.during, ev.before
    n = int(during.get("requests") or 0)
    keys = ("timeouts", "cloud_unavailable", "throttled", "canned")
    shares = {k: (_share(during, k), _share(before, k)) for k in keys}
    grown = sorted(
        ev.reasons,
        key=lambda r: (r["during"] / max(n, 1)) - (r["before"] / max(int(before.get("requests") or 0), 1)),
        reverse=True,
    )
    top_reason = grown[0]["reason"] if grown and grown[0]["during"] else ""

    def rose(key: str, floor: float, factor: float) -> bool:
        now, was = shares[key]
        return now is not None and now >= floor and (was is None or was == 0 or now >= factor * was)

    moved: list[str] = []
    if rule == "data_quality_blocking":
        section = RUNBOOK_SECTIONS[rule]
        return Named(
            rule_words or "blocking data-quality failure",
            [],
            "open the failing check on the Data quality page; the day's metrics stay held back until it passes",
            f"{RUNBOOK}#{section}",
            {},
        )
    cloud_open = ev.breaker_opened.get("cloud", 0)
    outage = bool(cloud_open) or rose("canned", 0.05, 3.0) or rose("cloud_unavailable", 0.05, 3.0)
    slow = rose("timeouts", 0.03, 2.0) or rose("throttled", 0.05, 2.0)
    # both in one long episode: the rule says which it is about (a breaker or a canned answer is the cloud's)
    if outage and (not slow or rule in ("cloud_breaker_open", "rollback_degrade_trigger")):
        cause = "cloud outage"
        moved.append(moved_line("canned answers (L4)", *shares["canned"], n))
        if shares["cloud_unavailable"][0]:
            moved.append(moved_line("cloud-unavailable fallbacks", *shares["cloud_unavailable"], n))
        if cloud_open:
            moved.append(f"cloud breaker opened {cloud_open} time{'s' if cloud_open != 1 else ''}")
        return Named(cause, moved, NEXT_STEPS[cause], f"{RUNBOOK}#{RUNBOOK_SECTIONS[cause]}", {"level": "4"})
    if slow:
        cause = "device slow (thermal?)"
        moved.append(moved_line("device timeouts", *shares["timeouts"], n))
        moved.append(moved_line("requests on a throttled device", *shares["throttled"], n))
        p90, p90_before = during.get("ttft_p90"), before.get("ttft_p90")
        if p90 is not None and p90 == p90:  # (NaN: no device answer)
            was = f" (baseline {p90_before:,.0f} ms)" if p90_before is not None and p90_before == p90_before else ""
            moved.append(f"device time to first token p90 {p90:,.0f} ms{was}")
        device_open = ev.breaker_opened.get("device", 0)
        if device_open:
            moved.append(f"device breaker opened {device_open} time{'s' if device_open != 1 else ''}")
        return Named(
            cause, moved, NEXT_STEPS[cause], f"{RUNBOOK}#{RUNBOOK_SECTIONS[cause]}", {"reason": "device_timeout"}
        )
    # a version first seen well inside the range (not already serving at the baseline's start): a push
    settled = (ev.baseline_start or datetime.min) + timedelta(minutes=5)
    new_versions = {v: t for v, t in ev.versions.items() if t is not None and t > settled}
    if new_versions and len(ev.versions) > 1:
        version, at = min(new_versions.items(), key=lambda kv: kv[1])
        cause = f"after push {version} at {at:%Y-%m-%d %H:%M} UTC"
        fb = (int(during.get("fallbacks") or 0), int(during.get("entered") or 0))
        fb_before = (int(before.get("fallbacks") or 0), int(before.get("entered") or 0))
        moved.append(
            f"fallback rate {_pct(fb[0] / fb[1] if fb[1] else None)} of {fb[1]:,} device-entered "
            f"(baseline {_pct(fb_before[0] / fb_before[1] if fb_before[1] else None)})"
        )
        explorer = {"policy_version": version, **({"reason": top_reason} if top_reason else {})}
        return Named(cause, moved, NEXT_STEPS["push"], f"{RUNBOOK}#{RUNBOOK_SECTIONS['push']}", explorer)
    if grown and grown[0]["during"]:
        r = grown[0]
        moved.append(
            f"fallbacks for {r['reason'].replace('_', ' ')} {_pct(r['during'] / max(n, 1))} of {n:,} requests "
            f"(baseline {_pct(r['before'] / max(int(before.get('requests') or 0), 1))})"
        )
    section = RUNBOOK_SECTIONS.get(rule, "")
    return Named(
        rule_words or rule.replace("_", " "),
        moved,
        "see the runbook section for this rule",
        f"{RUNBOOK}#{section}" if section else RUNBOOK,
        {"reason": top_reason} if top_reason else {},
    )
