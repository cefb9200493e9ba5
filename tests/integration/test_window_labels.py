"""The metric window's chosen labels are found either way round (routerscope/warehouse/queries/labels.py:
chosen_labels_of): from the window's requests when it has fewer events than there are stored labels, from the
labeled requests when it has more. Both must choose the same label for the same requests: checked here over
labels of requests in and out of the window, several per request from several sources, re-delivered ones, and
labels without a device verdict (never chosen)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from routerscope.contract.events import LABEL_SOURCES
from routerscope.warehouse.queries import decisions as decision_queries
from routerscope.warehouse.queries.labels import label_source_parameters
from routerscope.warehouse.sql import QueryWindow
from tests.support.events import decision, iso, label
from tests.support.golden_day import insert

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def chosen(client, sql: str) -> list[tuple]:
    client.command(decision_queries.DROP_WINDOW_SQL[1])
    client.command(sql, parameters=label_source_parameters())
    rows = client.query(
        f"SELECT request_id, labeled, acceptable, route_ok FROM {decision_queries._LABELS_TABLE} ORDER BY request_id"
    ).result_rows
    client.command(decision_queries.DROP_WINDOW_SQL[1])
    return rows


@pytest.mark.parametrize("seed", [1, 2])
def test_the_labels_chosen_from_either_side_are_the_same(warehouse, seed):
    rng = random.Random(seed)
    window = QueryWindow(T0, T0 + timedelta(days=1))
    decisions = [
        decision(request_id=f"r{i}", session_id=f"s{i}", event_time=iso(T0 + timedelta(hours=rng.uniform(-12, 36))))
        for i in range(300)
    ]
    labels = []
    for _ in range(500):
        request = f"r{rng.randrange(400)}"  # some label requests the warehouse never saw
        one = label(
            request_id=request,
            source=rng.choice(LABEL_SOURCES),
            device_acceptable=rng.choice((True, False, None)),
            route_correct=rng.choice((True, False, None)),
            event_time=iso(T0 + timedelta(hours=rng.uniform(0, 72))),
        )
        labels.append(one)
        if rng.random() < 0.1:
            labels.append(dict(one))  # re-delivered: the same label_id
    insert(warehouse, decisions, labels)
    decision_queries.drop_window(warehouse)
    warehouse.command(*decision_queries.events_statement(warehouse, window))
    try:
        from_window = chosen(warehouse, decision_queries.MATERIALIZE_LABELS_SQL)
        from_labels = chosen(warehouse, decision_queries.MATERIALIZE_FEWER_LABELS_SQL)
    finally:
        decision_queries.drop_window(warehouse)
    in_window = {
        d["request_id"]
        for d in decisions
        if window.start <= datetime.fromisoformat(d["event_time"].replace("Z", "+00:00")) < window.end
    }
    assert from_window == from_labels
    assert {r[0] for r in from_window} <= in_window
    assert len(from_window) > 20  # the comparison is over something
