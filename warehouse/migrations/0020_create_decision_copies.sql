-- Which copy of a decision's event_id comes first, decided when a copy is stored instead of by every metric
-- window reading the 7 days before it (docs/metrics.md, "each event_id counts once").
--
-- decision_later_copies: one row per ordered pair of copies of one event_id under different event_times: the
-- later copy's (event_time, event_id) and the earlier copy's time. Sorted by the later copy's event_time for
-- the metric window's read (`warehouse/queries/common.py: FIRST_COPY`): a window leaves out its rows that
-- have a row here whose earlier_time lies within the 7 days before its start or in it. Re-delivered copies
-- (the same event_time) make no pair: FINAL folds them. Writing a pair again is harmless (ReplacingMergeTree,
-- and the read asks only whether a pair exists), so a block seen twice changes nothing.
CREATE TABLE IF NOT EXISTS routerscope.decision_later_copies
(
    event_time DateTime64(3, 'UTC'),
    event_id UUID,
    earlier_time DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(event_time)
ORDER BY (event_time, event_id, earlier_time);

-- The stored decisions' ids and times, for the view below to join with: a materialized view reads its own
-- source table as the inserted block wherever it names it, a plain view over the table as the table.
CREATE VIEW IF NOT EXISTS routerscope.decision_ids AS SELECT event_id, event_time FROM routerscope.decisions;

-- Two views on `decisions`, so every insert path keeps the pairs (the loader's parsers, tests, benches).
-- Copies stored before: the inserted block joined with the stored copies of its own ids, both ways (a copy
-- stored before an existing later one writes the pair for that later one). The right side is narrowed to
-- the block's ids first (the IN's subquery, like the left side, reads the block): a join with every stored
-- row built a hash table of them per insert, 22-38 us an event of insert CPU with 2M rows stored against
-- 8-9 us narrowed (docs/benchmarks.md).
CREATE MATERIALIZED VIEW IF NOT EXISTS routerscope.decision_later_copies_view TO routerscope.decision_later_copies
AS SELECT greatest(n.event_time, c.event_time) AS event_time, n.event_id AS event_id,
          least(n.event_time, c.event_time) AS earlier_time
FROM routerscope.decisions AS n
INNER JOIN
(
    SELECT event_id, event_time FROM routerscope.decision_ids
    WHERE event_id IN (SELECT event_id FROM routerscope.decisions)
) AS c ON n.event_id = c.event_id
WHERE c.event_time != n.event_time;

-- Copies within the block itself (the stored table may not show them yet): every ordered pair of its times.
CREATE MATERIALIZED VIEW IF NOT EXISTS routerscope.decision_later_copies_in_block_view
TO routerscope.decision_later_copies
AS SELECT pair.2 AS event_time, event_id, pair.1 AS earlier_time
FROM
(
    SELECT event_id, arraySort(groupUniqArray(event_time)) AS times
    FROM routerscope.decisions
    GROUP BY event_id
    HAVING length(times) > 1
)
ARRAY JOIN arrayFilter(p -> p.1 < p.2, arrayFlatten(arrayMap(a -> arrayMap(b -> (a, b), times), times))) AS pair;

-- The pairs of what was stored before this migration (nothing on a fresh warehouse). Rows stored between
-- the views' creation and this statement get their pairs twice, which is harmless (above).
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
