"""The loader's SQL parser (routerscope/warehouse/queries/landing.py) against the Python validator
(routerscope/contract/validation.py), on the real embedded warehouse: for any message, the SQL either hands
it to Python (`python`) or reaches the same verdict, the same rule list in the same order, and for
a valid message the same facts row."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from routerscope.contract.validation import CONTRACTS
from routerscope.core import names
from routerscope.warehouse.client import open_warehouse
from routerscope.warehouse.ingest.rows import FACTS
from routerscope.warehouse.migrate import migrate
from routerscope.warehouse.queries import landing
from tests.support.bad_messages import MALFORMED, POISON, good_messages
from tests.support.events import breaker, capability_miss, decision, dumps, label, quality_fallback
from tests.support.home import settings_for

pytestmark = pytest.mark.integration

DECISIONS, LABELS, BREAKERS = names.TOPIC_DECISIONS, names.TOPIC_LABELS, names.TOPIC_BREAKERS


@pytest.fixture
def client(home):
    """An embedded warehouse held open for the test (chDB serves one path per process: not longer);
    merges stopped so that the facts rows written by the two parsers for the same event stay side by
    side (different partitions) to be compared."""
    settings_ = settings_for(home)
    with open_warehouse(settings_, purpose="test") as client:
        migrate(client)
        for topic in CONTRACTS:
            for sql in landing.CREATE[topic]:
                client.command(sql)
            client.command(f"SYSTEM STOP MERGES {names.DATABASE}.{FACTS[topic][0]}")
        yield client


def insert_raw(client, topic: str, batch: str, partition: int, offsets: list[int], payloads: list[bytes]) -> None:
    """The loader's insert of an `sql` batch: the raw messages into the topic's input table, whose
    views parse them (facts, ledger, verdicts). (Events over more than 100 months are in some
    batches here: the loader hands such a batch to the Python writer, which inserts by months.)"""
    n = len(payloads)
    client.insert(
        landing.INPUT_TABLE[topic],
        [[batch] * n, [partition] * n, offsets, payloads, [False] * n],
        column_names=list(landing.INPUT_COLUMNS),
        column_oriented=True,
        settings={**landing.INSERT_SETTINGS, "max_partitions_per_insert_block": 0},
    )


def sql_verdicts(client, topic: str, payloads: list[bytes]) -> list[tuple[bool, list[str]]]:
    """(python, rules) per payload, as the SQL parser sees them; and the loader's own statement (the
    views the raw messages are inserted through) leaves exactly the messages with a rule, or for
    Python, unloaded."""
    batch = uuid.uuid4().hex
    n = len(payloads)
    columns = [[batch] * n, [topic] * n, [0] * n, list(range(n)), [None] * n, [None] * n, payloads, [False] * n]
    client.insert(landing.LANDING_TABLE, columns, column_names=list(landing.LANDING_COLUMNS), column_oriented=True)
    rows = client.query(landing.CHECK[topic], parameters={"batch": batch}).result_rows
    assert [int(o) for o, *_ in rows] == list(range(n))
    insert_raw(client, topic, batch, 0, list(range(n)), payloads)
    left = {
        int(offset): bool(python)
        for _, offset, _, python in client.query(
            landing.VERDICTS, parameters={"batch": batch, "topic": topic}
        ).result_rows
    }
    out = []
    for offset, python, valid, rules in rows:
        if not python:
            assert bool(valid) == (not rules), (payloads[offset], rules)
        assert (offset in left) == (bool(python) or not valid), (payloads[offset], python, valid, rules)
        if offset in left:
            assert left[offset] == bool(python), payloads[offset]
        out.append((bool(python), list(rules)))
    return out


def assert_agree(client, topic: str, payloads: list[bytes]) -> int:
    """Every payload the SQL judges gets the Python validator's rules; returns how many it judged."""
    judged = 0
    for payload, (python, rules) in zip(payloads, sql_verdicts(client, topic, payloads)):
        if python:
            continue
        judged += 1
        _, expected = CONTRACTS[topic].parse(payload)
        assert rules == expected, f"{payload!r}: sql {rules} python {expected}"
    return judged


KNOWN_POISON = [p for _, p, _ in MALFORMED + POISON if p is not None]


def test_every_quarantine_class_gets_the_python_validators_rules(client):
    """The malformed kinds of test_ingest and the poison classes of test_ingest_poison, and good
    messages (v2, 130 months, maxima, JSON look-alikes in strings): same verdicts; and the SQL
    judges most of them itself (only what it cannot read exactly goes to Python)."""
    payloads = KNOWN_POISON + good_messages()
    judged = assert_agree(client, DECISIONS, payloads)
    assert judged >= len(payloads) - 12
    labels = [dumps(label()), dumps(label(source="gut_feeling")), dumps(label(device_acceptable=None)), b"{}"]
    breakers = [dumps(breaker()), dumps(breaker(to_state="closed", from_state="closed")), dumps(breaker(window_s=0))]
    assert assert_agree(client, LABELS, labels) == len(labels)
    assert assert_agree(client, BREAKERS, breakers) == len(breakers)


def test_valid_messages_make_the_same_facts_rows_as_the_python_parser(client):
    """Same table: each valid message, parsed by SQL (partition 1) and by msgspec (partition 0), is
    the same row in every column."""
    payloads = good_messages()[::7] + [
        dumps(quality_fallback(cost_usd=0.000123456789, confidence=0.1 + 0.2, breaker={"device": "open"})),
        dumps(capability_miss(app_id="ünïcødé ✓", event_time="2026-11-29T23:59:59.9999+05:30")),
        dumps(decision(event_time="1969-12-31T23:59:59.9995Z", latency_ms=1e-7, ttft_ms=12)),
    ]
    topic, (table, columns, build) = DECISIONS, FACTS[DECISIONS]
    events = [CONTRACTS[topic].parse(p)[0] for p in payloads]
    assert all(e is not None for e in events)
    offsets = list(range(10_000, 10_000 + len(payloads)))
    client.insert(
        f"{names.DATABASE}.{table}",
        build(events, topic, [0] * len(events), offsets),
        column_names=list(columns),
        column_oriented=True,
    )
    n = len(payloads)
    insert_raw(client, topic, uuid.uuid4().hex, 1, offsets, payloads)
    select = ", ".join(c for c in columns if c != "kafka_partition")
    rows = {
        p: client.query(
            f"SELECT {select} FROM {names.DATABASE}.{table} WHERE kafka_partition = {p} AND kafka_offset >= 10000 "
            "ORDER BY kafka_offset"
        ).result_rows
        for p in (0, 1)
    }
    assert len(rows[1]) == n
    assert rows[1] == rows[0]


def test_answer_check_and_device_input_tokens_load_through_both_parsers_and_are_null_when_absent(client):
    """The serve-time answer check's fields (contract v2, optional; migration 0060): an event carrying them holds
    them in `answer_check` and `device_input_tokens` whichever parser loaded it (Python: partition 0, SQL:
    partition 1); an event without them, and a v1 event, hold NULL."""
    carrying = quality_fallback(
        schema_version=2,
        request_id="checked",
        reason="validator_failed",
        attempts=[
            {"level": 0, "outcome": "validator_failed", "latency_ms": 200.0},
            {"level": 2, "outcome": "ok", "latency_ms": 700.0},
        ],
        confidence=0.9,
        answer_check="fields",
        device_input_tokens=5123,
    )
    payloads = [dumps(carrying), dumps(decision(schema_version=2, request_id="plain-v2")), dumps(decision())]
    topic, (table, columns, build) = DECISIONS, FACTS[DECISIONS]
    events = [CONTRACTS[topic].parse(p)[0] for p in payloads]
    assert all(e is not None for e in events)
    offsets = [20_000, 20_001, 20_002]
    client.insert(
        f"{names.DATABASE}.{table}",
        build(events, topic, [0] * 3, offsets),
        column_names=list(columns),
        column_oriented=True,
    )
    insert_raw(client, topic, uuid.uuid4().hex, 1, offsets, payloads)
    rows = client.query(
        f"SELECT kafka_partition, request_id, answer_check, device_input_tokens FROM {names.DATABASE}.{table} "
        "WHERE kafka_offset >= 20000 ORDER BY kafka_partition, kafka_offset"
    ).result_rows
    expected = [("checked", "fields", 5123), ("plain-v2", None, None), ("req-1", None, None)]
    assert [r[1:] for r in rows if r[0] == 0] == [
        (e["request_id"], *x[1:]) for e, x in zip([json.loads(p) for p in payloads], expected)
    ]
    assert [r[1:] for r in rows if r[0] == 1] == [r[1:] for r in rows if r[0] == 0]


# -- arbitrary messages ------------------------------------------------------------------------------
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0, 1, 2, 3, 4, 5, 1.0, 2.0, -1, 0.5, 1e300, 86_400_001, 10_000_001, 2**63, 2**64])
    | st.text(max_size=12)
    | st.sampled_from(
        [
            "2026-11-29T12:00:00Z",
            "2026-11-29T12:00:00.123456+01:00",
            "2026-02-29T00:00:00Z",
            "2024-02-29T23:59:59.9999-23:59",
            "1899-12-31T23:59:59.999Z",
            "2299-12-31T23:59:59.9995Z",
            "0001-01-01T00:00:00+00:01",
            "2026-11-29T24:00:00Z",
            "2026-11-29 12:00:00Z",
            "ok",
            "open",
            "quality",
            "capability_miss",
            "pii_pin",
            "device_busy",
            "wifi",
            "logprob",
            "canary",
            "nominal",
            "human_review",
            "00000000-0000-0000-0000-00000000000a",
            "0123456789abcdef0123456789abcdef",
            "x" * 129,
        ]
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
_attempts = st.lists(
    st.fixed_dictionaries(
        {
            "level": st.integers(0, 5),
            "outcome": st.sampled_from(["ok", "timeout", "nope"]),
            "latency_ms": st.floats(0, 1e8),
        }
    ),
    min_size=0,
    max_size=6,
)
_bases = {
    DECISIONS: [decision, quality_fallback, capability_miss],
    LABELS: [label],
    BREAKERS: [breaker],
}


@st.composite
def messages(draw, topic: str) -> bytes:
    """A valid event of `topic` with a few random edits: fields dropped, replaced by any JSON value,
    unknown fields, attempts and nested objects rewritten; encoded compactly or with spaces, at
    times with a key repeated or the bytes cut short."""
    event = draw(st.sampled_from(_bases[topic]))()
    fields = sorted(event) + (
        ["device_stats", "breaker", "all_cloud_cost_usd", "rollout_stage", "cost_usd"]
        if topic == DECISIONS
        else ["route_correct", "labeler", "trigger"]
    )
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(fields + ["unknown_" + draw(st.text("abc", min_size=1, max_size=3))]))
        action = draw(st.sampled_from(["drop", "value", "value", "attempts", "object"]))
        if action == "drop":
            event.pop(name, None)
        elif action == "attempts" and topic == DECISIONS:
            event["attempts"] = draw(_attempts)
        elif action == "object" and topic == DECISIONS:
            event[draw(st.sampled_from(["device_stats", "breaker"]))] = draw(
                st.dictionaries(
                    st.sampled_from(
                        ["peak_mem_mb", "thermal_state", "decode_tps", "cold_start", "load_ms", "device", "cloud", "x"]
                    ),
                    _json_values,
                    max_size=3,
                )
            )
        else:
            event[name] = draw(_json_values)
    if draw(st.booleans()):
        event["schema_version"] = draw(st.sampled_from([1, 2]))
    raw = json.dumps(
        event, ensure_ascii=draw(st.booleans()), separators=draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    ).encode()
    tail = draw(st.sampled_from(["", "", "", "repeat", "cut", "float-int"]))
    if tail == "repeat":
        raw = raw[:-1] + b', "' + draw(st.sampled_from(sorted(event) or ["x"])).encode() + b'": 1}'
    elif tail == "cut":
        raw = raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]
    elif tail == "float-int" and b'"cloud_calls": 0' in raw:
        raw = raw.replace(b'"cloud_calls": 0', b'"cloud_calls": 0.0')
    return raw


# No shrinking: each example is a round trip to the warehouse, and the assertion names the message.
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    phases=(Phase.explicit, Phase.generate),
)
@given(
    batch=st.lists(messages(DECISIONS), min_size=1, max_size=24),
    labels=st.lists(messages(LABELS), max_size=8),
    breakers=st.lists(messages(BREAKERS), max_size=8),
    garbage=st.lists(st.binary(max_size=60), max_size=3),
)
@pytest.mark.slow
@example(batch=KNOWN_POISON[:12], labels=[], breakers=[], garbage=[b"", b"null", b"[]", b'"x"', b"1e999", b"{}"])
def test_sql_and_python_validators_agree_on_arbitrary_messages(client, batch, labels, breakers, garbage):
    """Property: on any message, the SQL parser either hands it to Python or names exactly the
    Python validator's rules (valid ⇔ no rule). (~20 s: twelve examples of up to 40 messages, each
    a round trip of landing, parse and rule queries per topic.)"""
    assert_agree(client, DECISIONS, batch + garbage)
    if labels:
        assert_agree(client, LABELS, labels + garbage)
    if breakers:
        assert_agree(client, BREAKERS, breakers)


# -- the whole loader --------------------------------------------------------------------------------
def _snapshot(settings_) -> dict[str, list]:
    """Every loaded, ledgered and quarantined row, without load times, in a stable order."""
    tables = {
        FACTS[DECISIONS][0]: "* EXCEPT (ingested_at)",
        FACTS[LABELS][0]: "* EXCEPT (ingested_at)",
        FACTS[BREAKERS][0]: "* EXCEPT (ingested_at)",
        names.TABLE_LOADED_MESSAGES: "* EXCEPT (loaded_at)",
        names.TABLE_QUARANTINE: "* EXCEPT (quarantined_at)",
    }
    with open_warehouse(settings_, purpose="test") as client:
        rows = {
            table: client.query(
                f"SELECT {columns} FROM {names.DATABASE}.{table} ORDER BY kafka_topic, kafka_partition, kafka_offset"
            ).result_rows
            for table, columns in tables.items()
        }
        # batch boundaries depend on how the broker's fetches fell: positions compared per partition
        rows[names.TABLE_INGEST_OFFSETS] = client.query(
            f"SELECT kafka_topic, kafka_partition, max(next_offset), sum(rows_loaded), sum(rows_quarantined) "
            f"FROM {names.DATABASE}.{names.TABLE_INGEST_OFFSETS} GROUP BY kafka_topic, kafka_partition "
            "ORDER BY kafka_topic, kafka_partition"
        ).result_rows
        return rows


@pytest.mark.slow
def test_the_sql_parser_loads_exactly_what_the_python_parser_loads_and_replays_nothing(stack):
    """(~20 s: three loads; the warehouse plans its parse once per batch and topic.) `load --parser sql`
    against `--parser python` on the same messages (good ones, every malformed kind, a refused insert left
    aside): the same facts, ledger, quarantine (raw bytes, rules, error text) and positions. Then positions
    forgotten: the sql parser finds every landed row and adds none."""
    from routerscope.warehouse.ingest.loader import load
    from tests.support.ingest import produce, valid_decisions

    produce(stack, DECISIONS, valid_decisions(150) + [p for _, p, _ in MALFORMED] + valid_decisions(10))
    produce(stack, LABELS, [dumps(label(request_id=f"req-{i}")) for i in range(20)] + [b"nope", None])
    produce(stack, BREAKERS, [dumps(breaker()), dumps(breaker(from_state="open", to_state="open"))])
    fast = dict(idle_timeout_s=0.5, batch_size=128)  # two batches, so that tokens and positions move
    by_sql = load(stack, parser="sql", **fast)
    loaded = _snapshot(stack)
    with open_warehouse(stack) as client:
        for table in loaded:
            client.command(f"TRUNCATE TABLE {names.DATABASE}.{table}")
    by_python = load(stack, parser="python", **fast)
    assert by_sql.as_dict() == by_python.as_dict()
    assert by_sql.quarantined["decisions"] == len(MALFORMED)
    assert _snapshot(stack) == loaded
    with open_warehouse(stack) as client:
        client.command(f"TRUNCATE TABLE {names.DATABASE}.{names.TABLE_INGEST_OFFSETS}")
    replay = load(stack, parser="sql", **fast)
    assert replay.skipped_already_loaded == 160 + len(MALFORMED) + 22 + 2
    assert sum(replay.loaded.values()) == sum(replay.quarantined.values()) == 0
    after = _snapshot(stack)
    for table in (FACTS[DECISIONS][0], names.TABLE_QUARANTINE):
        assert after[table] == loaded[table]
