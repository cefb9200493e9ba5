"""The what-if's one pass for every candidate (`routerscope/warehouse/queries/whatif.py: combine`): each candidate's
totals from groups of events by the move they can make (`kind`), where their breakpoint falls among the asked
candidates (`k`, counted over every task type's candidates together) and whether they are counted as they stay or as
they move (`state`). The figures are worked out by hand from docs/whatif.md's definition."""

from __future__ import annotations

import pytest

from routerscope.warehouse.queries.whatif import combine, parameters


def group(kind: int, k: int, state: int, requests: int, fallbacks: int, cost, threshold=None) -> dict:
    gated = int(kind != 0)
    return {
        "task_type": "a",
        "kind": kind,
        "k": k,
        "state": state,
        "requests": requests,
        "gated": gated,
        "fallbacks": fallbacks,
        "cost": cost,
        "threshold_min": threshold,
        "threshold_max": threshold,
    }


# Task type "a" asked at 0.5 and 0.8, task type "b" at 0.6: the grid is [0.5, 0.6, 0.8], and `k` counts the grid's
# values at or below each event's breakpoint.
CANDIDATES = {"a": [0.8, 0.5], "b": [0.6]}


def rows() -> list[dict]:
    return [
        # two events that cannot move (not gated), one of them a fallback, neither reporting a cost
        group(0, 0, 0, requests=2, fallbacks=1, cost=None),
        # an L0 answer served at confidence 0.60 (grid 0.5, 0.6 at or below: k 2): to the cloud under a candidate
        # above 0.60, i.e. 0.8, costing its all-cloud 0.004
        group(1, 2, 0, requests=1, fallbacks=0, cost=0.0, threshold=0.6),
        group(1, 2, 1, requests=1, fallbacks=1, cost=0.004, threshold=0.6),
        # another at 0.55 (k 1): one position among a's candidates with the one above (both have 0.5 below them)
        group(1, 1, 0, requests=1, fallbacks=0, cost=0.0, threshold=0.6),
        group(1, 1, 1, requests=1, fallbacks=1, cost=0.001, threshold=0.6),
        # an L0 answer turned down at 0.60 that fell back (cost 0.002): to the device under a candidate at or below
        # 0.60, i.e. 0.5
        group(2, 2, 0, requests=1, fallbacks=1, cost=0.002, threshold=0.7),
        group(2, 2, 1, requests=1, fallbacks=0, cost=0.0, threshold=0.7),
        # rescued by the L1 retry under a recorded threshold of 0.55 (k 1): unknown (a fallback) above 0.55, i.e. 0.8
        group(3, 1, 0, requests=1, fallbacks=0, cost=0.0, threshold=0.55),
        group(3, 1, 1, requests=1, fallbacks=1, cost=0.0, threshold=0.55),
    ]


def test_every_candidate_totals_what_moves_under_it_worked_by_hand():
    """current: 6 requests, fallbacks 1 + 1 (the turned-down one) = 2, cost 0.002, recorded thresholds 0.55-0.7
    (only the gated events' groups). At 0.5 only the turned-down answer moves (to the device): fallbacks 1, cost 0.
    At 0.8 both served answers move to the cloud and the rescued one is unknown: fallbacks 2 + 2 + 1 = 5, cost
    0.002 + 0.004 + 0.001 = 0.007. Every count is the same number of requests, whatever the candidate."""
    assert parameters(CANDIDATES) == {"grid": [0.5, 0.6, 0.8]}
    found = combine(rows(), CANDIDATES)
    assert list(found) == ["a"]  # b has no events
    totals = {x: per[None] for x, per in found["a"].items()}
    assert set(totals) == {None, 0.5, 0.8}
    assert {x: (t["requests"], t["fallbacks"]) for x, t in totals.items()} == {None: (6, 2), 0.5: (6, 1), 0.8: (6, 5)}
    assert totals[None]["cost"] == pytest.approx(0.002)
    assert totals[0.5]["cost"] == pytest.approx(0.0)
    assert totals[0.8]["cost"] == pytest.approx(0.007)
    for t in totals.values():
        assert (t["threshold_min"], t["threshold_max"]) == (0.55, 0.7)


def test_a_candidate_asked_twice_counts_its_events_once():
    """The same candidates asked with one twice give the same totals (one pass per distinct value)."""
    once = combine(rows(), CANDIDATES)
    twice = combine(rows(), {"a": [0.5, 0.8, 0.5], "b": [0.6, 0.6]})
    assert twice == once


def test_buckets_keep_their_own_totals_and_order():
    """With a `by` column (the §3c strata's confidence bucket) each bucket is totalled alone, in bucket order, a
    null confidence's -1 first; a bucket of events that cannot move reads the same under every candidate."""
    tagged = [dict(r, bucket=2) for r in rows()]
    tagged[0]["bucket"] = -1
    found = combine(tagged, CANDIDATES, by="bucket")
    for x in (None, 0.5, 0.8):
        assert list(found["a"][x]) == [-1, 2]
        assert found["a"][x][-1]["fallbacks"] == 1
    assert [found["a"][x][2]["fallbacks"] for x in (None, 0.5, 0.8)] == [1, 0, 4]


def test_no_candidate_is_refused():
    with pytest.raises(ValueError, match="no candidate"):
        parameters({"a": []})
