"""The data frames the data-quality checks read (`routerscope.warehouse.analytics.quality`), one window at a time.

Each frame is one row per event (or per Kafka partition, or one row of figures) carrying the
columns the checks test; where a check needs a derived value, the frame computes it here as an
`ok_*` column (TRUE when the row respects the rule), so every check is a plain expectation.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from routerscope.core import names
from routerscope.warehouse.queries.breaker_events import CHAIN_ORDER
from routerscope.warehouse.schema import DECISION_COLUMNS
from routerscope.warehouse.sql import DEDUP_HORIZON_DAYS, PENDING, QueryWindow, named, utc_text

if TYPE_CHECKING:
    import pandas as pd

# The invariants of docs/contract.md as SQL over a `decisions` row: TRUE when the row respects it. Written
# again here on purpose (a second line against a loader bug); names match
# `routerscope.contract.validation.DECISION_INVARIANTS` (a test keeps the two lists equal).
INVARIANT_SQL: dict[str, str] = {
    "capability_iff_capability_miss": "(fallback_type = 'capability') = (reason = 'capability_miss')",
    "capability_not_entered": "NOT (fallback_type = 'capability' AND entered_device)",
    "device_fallback_entered_device": "NOT (fallback_type IN ('quality', 'timeout', 'error') AND NOT entered_device)",
    "device_fallback_level_at_least_2": "NOT (fallback_type IN ('quality', 'timeout', 'error') AND degrade_level < 2)",
    "served_on_device_level": (
        "NOT (fallback_type = 'none' AND entered_device AND degrade_level > 1 AND mode = 'live')"
    ),
    "not_entered_no_device_attempt": "entered_device OR NOT arrayExists(l -> l <= 1, attempt_levels)",
    "entered_first_attempt_on_device": "NOT entered_device OR (length(attempt_levels) > 0 AND attempt_levels[1] <= 1)",
    "attempt_levels_non_decreasing": "arraySort(attempt_levels) = attempt_levels",
    "level_1_at_most_once": "countEqual(attempt_levels, 1) <= 1",
    "last_attempt_is_degrade_level": "length(attempt_levels) > 0 AND attempt_levels[-1] = degrade_level",
    "cloud_calls_cover_cloud_attempts": "cloud_calls >= arrayCount(l -> l IN (2, 3), attempt_levels)",
    "pii_pin_has_pii": "reason != 'pii_pin' OR ifNull(has_pii, false)",
    "pii_pin_no_cloud_attempt": "reason != 'pii_pin' OR NOT arrayExists(l -> l IN (2, 3), attempt_levels)",
    "pii_pin_no_cloud_calls": "reason != 'pii_pin' OR cloud_calls = 0",
    "low_confidence_below_threshold": "reason != 'low_confidence' OR ifNull(confidence < threshold, false)",
}

_INVARIANT_COLUMNS = ",\n       ".join("toBool(" + sql + ") AS ok_" + name for name, sql in INVARIANT_SQL.items())
# Everything a decision row says, lineage aside: two rows with one event_id and sorting key but
# different contents are two different events that ReplacingMergeTree would silently fold into one.
_CONTENT = "tuple(" + ", ".join(c for c in DECISION_COLUMNS if not c.startswith("kafka_")) + ")"

# Constant pieces the statements below share (named() puts them in before it spells the tables).
# How far back a window's event ids are looked for (common.DEDUP_HORIZON_DAYS, the metrics' look-back
# too): an id seen again within it under another time is two events or one counted twice.
#
# `ok_id_once_in_horizon`: no copy of the row's event_id in the horizon before the window's start. Such a copy is
# earlier than the row, so the derived pairs (`decision_later_copies`, migration 0020; warehouse/sql.py FIRST_COPY)
# hold the row's pair with it: the check reads the window's pairs instead of every event_id of the 7 days before
# it. While decisions stored since the last derivation exist (sql.PENDING), it reads those 7 days as before (the
# subquery's WHERE is otherwise constant false and reads nothing): the same verdict either way.
_ID_ONCE_IN_HORIZON = f"""(event_id, event_time) NOT IN (
           SELECT event_id, event_time FROM $decision_later_copies
           WHERE event_time >= {{start:DateTime64(3, 'UTC')}} AND event_time < {{end:DateTime64(3, 'UTC')}}
             AND earlier_time >= {{start:DateTime64(3, 'UTC')}} - INTERVAL {DEDUP_HORIZON_DAYS} DAY
             AND earlier_time < {{start:DateTime64(3, 'UTC')}})
       AND (NOT {PENDING} OR event_id NOT IN (
           SELECT event_id FROM $decisions
           WHERE {PENDING}
             AND event_time >= {{start:DateTime64(3, 'UTC')}} - INTERVAL {DEDUP_HORIZON_DAYS} DAY
             AND event_time < {{start:DateTime64(3, 'UTC')}}))"""
FRAGMENTS = {"invariant_columns": _INVARIANT_COLUMNS, "content": _CONTENT, "id_once_in_horizon": _ID_ONCE_IN_HORIZON}

DECISIONS_FRAME_SQL = named(
    "dq_decisions",
    """
SELECT toString(event_id) AS event_id, event_time, schema_version, request_id, session_id, task_type, mode,
       entered_device, fallback_type, reason, degrade_level, attempt_levels, cloud_calls, confidence,
       confidence_source, threshold, latency_ms, deadline_ms, has_pii, network, policy_version,
       device_thermal_state, rollout_stage, device_peak_mem_mb, device_decode_tps, device_prefill_tps, device_load_ms,
       all_cloud_cost_usd,
       $invariant_columns,
       toBool((event_id, task_type, event_time) NOT IN (
           SELECT event_id, task_type, event_time FROM $decisions
           WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
             AND event_id IN (  -- only ids delivered more than once pay for comparing contents
                 SELECT event_id FROM $decisions
                 WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
                 GROUP BY event_id HAVING count() > 1)
           GROUP BY event_id, task_type, event_time HAVING uniqExact($content) > 1)) AS ok_one_content,
       toBool($id_once_in_horizon) AS ok_id_once_in_horizon
FROM $decisions FINAL
WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
""",
    FRAGMENTS,
)

LABELS_FRAME_SQL = named(
    "dq_labels",
    """
SELECT toString(label_id) AS label_id, event_time, schema_version, request_id, source, device_acceptable
FROM $labels FINAL
WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
""",
)

# `ok_breaker_transitions_chain`: each transition starts where the breaker's previous one ended
# (from_state = the previous to_state) and, when both carry the router's `seq`, right after it
# (seq = previous + 1: none lost, none repeated). "Previous" is in the breaker's own order
# (breaker_events.CHAIN_ORDER: seq, then time for events without one), over the breaker's history up to
# the window's end, so the window's first transition is checked against the one before the window.
BREAKERS_FRAME_SQL = named(
    "dq_breakers",
    """
SELECT toString(event_id) AS event_id, event_time, schema_version, instance_id, boundary, seq, from_state, to_state,
       failure_rate,
       toBool(from_state != to_state) AS ok_breaker_state_changes,
       toBool(position = 1 OR (from_state = previous_to
                               AND (seq IS NULL OR previous_seq IS NULL OR seq = previous_seq + 1)))
           AS ok_breaker_transitions_chain
FROM (
    SELECT *, row_number() OVER chain AS position, lagInFrame(to_state) OVER chain AS previous_to,
           lagInFrame(seq) OVER chain AS previous_seq
    FROM $breaker_events FINAL
    WHERE event_time < {end:DateTime64(3, 'UTC')} AND (instance_id, boundary) IN (
        SELECT instance_id, boundary FROM $breaker_events
        WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')})
    WINDOW chain AS (PARTITION BY instance_id, boundary ORDER BY $chain_order)
)
WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
""",
    {"chain_order": CHAIN_ORDER},
)

# Completeness per Kafka partition, from the loader's ledger (`loaded_messages`, which keeps every
# loaded offset with its record's id and event_time): between the first and the last offset of the
# window's messages, every offset is in the ledger or in the quarantine; and every record the
# ledger says was loaded in the window still exists in `decisions` (a row folded to `rejected` was
# refused as a fact and sits in the quarantine). `missing` counts both holes.
OFFSETS_FRAME_SQL = named(
    "dq_offsets",
    """
WITH ledger AS (
    SELECT kafka_topic, kafka_partition, kafka_offset, record_id FROM $loaded_messages FINAL
    WHERE kafka_topic = {topic:String} AND NOT rejected
      AND event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
),
span AS (
    SELECT kafka_topic, kafka_partition, min(kafka_offset) AS first, max(kafka_offset) AS last, count() AS loaded,
           countIf(record_id NOT IN (
               SELECT event_id FROM $decisions
               WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')})) AS lost
    FROM ledger
    GROUP BY kafka_topic, kafka_partition
),
accounted AS (
    SELECT s.kafka_topic AS kafka_topic, s.kafka_partition AS kafka_partition, uniqExact(x.kafka_offset) AS present
    FROM span AS s
    INNER JOIN (
        SELECT kafka_topic, kafka_partition, kafka_offset FROM $loaded_messages
        UNION ALL
        SELECT kafka_topic, kafka_partition, kafka_offset FROM $quarantine
    ) AS x ON x.kafka_topic = s.kafka_topic AND x.kafka_partition = s.kafka_partition
    WHERE x.kafka_offset BETWEEN s.first AND s.last
    GROUP BY kafka_topic, kafka_partition
)
SELECT s.kafka_topic AS kafka_topic, s.kafka_partition AS kafka_partition, s.first AS first, s.last AS last,
       toInt64(s.last - s.first + 1) AS expected,
       toInt64(ifNull(a.present, 0)) AS present,
       toInt64(s.lost) AS lost,
       expected - present + lost AS missing
FROM span AS s
LEFT JOIN accounted AS a ON a.kafka_topic = s.kafka_topic AND a.kafka_partition = s.kafka_partition
ORDER BY kafka_partition
""",
)

# One row of pipeline figures for the window (`routerscope.warehouse.analytics.quality.frames.stats_frame` turns them
# into
# the shares and ratios the checks read).
STATS_SQL = named(
    "dq_window_stats",
    """
WITH span AS (
    SELECT kafka_topic, kafka_partition, min(kafka_offset) AS first, max(kafka_offset) AS last, count() AS loaded
    FROM $decisions
    WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}
    GROUP BY kafka_topic, kafka_partition
)
SELECT
    (SELECT count() FROM $decisions FINAL
     WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}) AS requests,
    (SELECT count() FROM $decisions FINAL
     WHERE event_time >= {prev_start:DateTime64(3, 'UTC')} AND event_time < {prev_end:DateTime64(3, 'UTC')})
        AS requests_week_before,
    (SELECT count() FROM $quarantine AS q
     WHERE (q.kafka_topic, q.kafka_partition) IN (SELECT kafka_topic, kafka_partition FROM span)
       AND q.kafka_offset >= (SELECT min(first) FROM span)
       AND q.kafka_offset <= (SELECT max(last) FROM span)) AS quarantined,
    (SELECT max(event_time) FROM $decisions WHERE event_time <= {horizon:DateTime64(3, 'UTC')}) AS newest_event,
    (SELECT count() FROM $decisions FINAL WHERE event_time > {horizon:DateTime64(3, 'UTC')}) AS future_events,
    (SELECT countIf(entered_device AND fallback_type IN ('quality', 'timeout') AND mode = 'live')
     FROM $decisions FINAL
     WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}) AS judged_fallbacks,
    (SELECT countIf(entered_device AND fallback_type IN ('quality', 'timeout') AND mode = 'live'
                    AND request_id IN (SELECT request_id FROM $labels))
     FROM $decisions FINAL
     WHERE event_time >= {start:DateTime64(3, 'UTC')} AND event_time < {end:DateTime64(3, 'UTC')}) AS labeled_fallbacks
""",
)


def decisions_frame(client, window: QueryWindow) -> pd.DataFrame:
    """The window's decisions, de-duplicated, with one `ok_<invariant>` column per docs/contract.md rule and
    `ok_one_content` (FALSE when another event with different contents shares the row's key)."""
    return client.query_df(DECISIONS_FRAME_SQL, parameters=window.parameters())


def labels_frame(client, window: QueryWindow) -> pd.DataFrame:
    return client.query_df(LABELS_FRAME_SQL, parameters=window.parameters())


def breakers_frame(client, window: QueryWindow) -> pd.DataFrame:
    """The window's breaker events, with `ok_breaker_state_changes` and `ok_breaker_transitions_chain`."""
    return client.query_df(BREAKERS_FRAME_SQL, parameters=window.parameters())


def offsets_frame(client, window: QueryWindow) -> pd.DataFrame:
    """One row per Kafka partition of the decisions topic: offsets expected, present, lost, `missing`."""
    return client.query_df(OFFSETS_FRAME_SQL, parameters={**window.parameters(), "topic": names.TOPIC_DECISIONS})


def window_stats(client, window: QueryWindow, week_before: QueryWindow, horizon: datetime) -> dict[str, Any]:
    """Requests in the window and in `week_before`, messages quarantined among the window's offsets,
    the newest event not later than `horizon` (None without one), events later than `horizon`,
    judged and labeled live fallbacks."""
    previous = week_before.parameters()
    result = client.query(
        STATS_SQL,
        parameters={
            **window.parameters(),
            "prev_start": previous["start"],
            "prev_end": previous["end"],
            "horizon": utc_text(horizon),
        },
    )
    return dict(zip(result.column_names, result.result_rows[0]))
