-- A window reads its decisions without FINAL when FINAL would fold nothing in it (warehouse/sql.py: FOLD_CHECK):
-- each sorting key stored more than once (an exact re-delivery: one event_id, one event_time) is marked in
-- decision_later_copies by a row whose earlier_time equals its event_time, written by the derivation
-- (warehouse/queries/decision_copies.py) from this migration on. FIRST_COPY reads only earlier_time < event_time,
-- so a marker is never taken for a pair.
--
-- The keys already derived before this migration are marked here, once: the rows stored up to the last
-- derivation, grouped by sorting key (an already folded key counts once, as FINAL reads it). Writing a marker
-- again is harmless (the table folds).
INSERT INTO routerscope.decision_later_copies
SELECT event_time, event_id, event_time
FROM routerscope.decisions
WHERE ingested_at <= (SELECT max(derived_through) FROM routerscope.decision_copies_derived)
GROUP BY task_type, event_time, event_id
HAVING count() > 1;
