-- Which copy of a decision's event_id comes first, decided when a copy is stored instead of by every metric
-- window reading the 7 days before it (docs/metrics.md, "each event_id counts once"). Two tables, kept by
-- two views on `decisions`, so every insert path keeps them (the loader's parsers, tests, benches):
--
-- decision_ids: every stored (event_id, event_time), in id order: what a new copy is matched against.
-- decision_later_copies: one row per ordered pair of copies of one event_id under different event_times:
--   the later copy's (event_time, event_id) and the earlier copy's time. Sorted by the later copy's
--   event_time for the metric window's read (`warehouse/queries/common.py: FIRST_COPY`): a window leaves
--   out its rows that have a row here whose earlier_time lies within the 7 days before its start or in it.
--   A copy stored before an existing later one writes the pair for that later one (the view joins the
--   block's ids with decision_ids both ways). Re-delivered copies (same event_time) make no pair: FINAL
--   folds them. Writing a pair or an id again is harmless (ReplacingMergeTree, and the read asks only
--   whether a pair exists), so a block seen twice changes nothing.
CREATE TABLE IF NOT EXISTS routerscope.decision_ids
(
    event_id UUID,
    event_time DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (event_id, event_time);

CREATE TABLE IF NOT EXISTS routerscope.decision_later_copies
(
    event_time DateTime64(3, 'UTC'),
    event_id UUID,
    earlier_time DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (event_time, event_id, earlier_time);

-- The block's ids grouped (two copies may arrive in one block), joined with every stored copy of those ids;
-- every ordered pair of distinct times is written (k copies: k(k-1)/2 rows; copies are rare). `hit` tells a
-- stored copy from the LEFT JOIN's default row.
CREATE MATERIALIZED VIEW IF NOT EXISTS routerscope.decision_later_copies_view TO routerscope.decision_later_copies
AS SELECT pair.2 AS event_time, event_id, pair.1 AS earlier_time
FROM
(
    SELECT n.event_id AS event_id,
           arraySort(arrayDistinct(arrayConcat(any(n.times), groupArrayIf(c.event_time, c.hit = 1)))) AS times
    FROM (SELECT event_id, groupUniqArray(event_time) AS times FROM routerscope.decisions GROUP BY event_id) AS n
    LEFT JOIN (SELECT event_id, event_time, 1 AS hit FROM routerscope.decision_ids) AS c ON n.event_id = c.event_id
    GROUP BY n.event_id
    HAVING length(times) > 1
)
ARRAY JOIN arrayFilter(p -> p.1 < p.2, arrayFlatten(arrayMap(a -> arrayMap(b -> (a, b), times), times))) AS pair;

CREATE MATERIALIZED VIEW IF NOT EXISTS routerscope.decision_ids_view TO routerscope.decision_ids
AS SELECT event_id, event_time FROM routerscope.decisions;

-- What was stored before this migration (a no-op on a fresh warehouse). Rows stored between the views'
-- creation and these statements are written twice, which is harmless (above).
INSERT INTO routerscope.decision_ids SELECT event_id, event_time FROM routerscope.decisions;

INSERT INTO routerscope.decision_later_copies
SELECT pair.2 AS event_time, event_id, pair.1 AS earlier_time
FROM
(
    SELECT event_id, arraySort(groupUniqArray(event_time)) AS times
    FROM routerscope.decisions
    GROUP BY event_id
    HAVING length(times) > 1
)
ARRAY JOIN arrayFilter(p -> p.1 < p.2, arrayFlatten(arrayMap(a -> arrayMap(b -> (a, b), times), times))) AS pair;
