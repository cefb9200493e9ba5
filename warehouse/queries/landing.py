"""The SQL parser: raw Kafka messages landed as bytes, parsed and validated by the warehouse.

The loader's `sql` parser inserts each batch of messages, untouched, into `$landing` (one columnar
insert of topic, partition, offset, key, timestamp and value bytes). One `INSERT … SELECT` per topic
then parses them into a per-topic staging table: the facts columns, `valid` (no rule broken) and
`python` (see below). From the staging table one `INSERT … SELECT` each fills the facts table and
the ledger (warehouse/queries/loaded_messages.py); the invalid messages' rules, by the same names as
`instrumentation.contract` (`QUARANTINE_RULES`), go to the quarantine through the loader's Python
writer with their raw bytes. The SQL is generated from the contract's field annotations
(msgspec.inspect) and its invariants' `sql`: one definition of the rules.

**Where SQL cannot be exact, Python decides.** A message goes back to the Python validator
(`python` = 1) when the warehouse's reading of it could differ from msgspec's: it is not valid JSON
to the warehouse (msgspec tells json.invalid from json.too_deep), it has more than a few brackets
(nesting depth), a backslash (escapes, lone surrogates), an integer field spelled like a float
(`1.0`: the warehouse reads both as 1), a number of 19 digits or more, a timestamp not in the plain
RFC 3339 shape, or more `":` pairs than keys at the levels the contract knows (a repeated key, or an
object where none belongs). The router's own messages are none of these.

Every row computes its facts columns and `valid` (no rule broken); only the invalid rows compute
their rule lists (`QUARANTINE_RULES`), so a batch of good messages pays for the checks, not for
building fifty arrays a row. Short-circuit evaluation is off (`PARSE_SETTINGS`): with it on, the
warehouse recomputes the shared parts of each lazily evaluated branch, and the parse ran 50x slower.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta

import msgspec.inspect as mi

from instrumentation.contract import (
    ATTEMPT_LATENCY_MAX,
    CONTRACTS,
    DECISION_MAXIMA,
    DEVICE_STATS_MAXIMA,
    EVENT_TIME_MAX,
    EVENT_TIME_MIN,
    MAX_MESSAGE_BYTES,
    Contract,
)
from instrumentation.events import V2_ONLY_ATTEMPT_FIELDS, V2_ONLY_FIELDS, V2_ONLY_REASONS
from routerscope.core import names
from warehouse.ingest.rows import FACTS
from warehouse.queries.common import named

LANDING_TABLE = names.TABLES[names.TABLE_LANDING]
LANDING_COLUMNS = (
    "batch",
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
    "kafka_key",
    "kafka_timestamp",
    "value",
    "landed",
)
# A message with more brackets than this goes to the Python validator (nesting depth; a decision
# has at most 9).
MAX_SQL_BRACKETS = 24
# Numbers are read back from the warehouse's JSON text: parse them exactly as Python does.
PARSE_SETTINGS = {"precise_float_parsing": 1, "short_circuit_function_evaluation": "disable"}
# ... spelled in each parsing statement itself (no session settings to set and restore around it).
_SETTINGS = " SETTINGS " + ", ".join(f"{k} = {v!r}" for k, v in PARSE_SETTINGS.items())

_TIME_RE = r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)


def _q(text: str) -> str:
    """A SQL string literal (for constants of the contract, never for data)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _epoch_us(t: datetime) -> int:
    return (t - _EPOCH) // _ONE_US


# A value is the JSON text of one member of an object (`JSONExtractKeysAndValuesRaw`): its first
# byte tells its type. Strings hold no escape (a message with a backslash goes to Python), so a
# string's value is its text between the quotes.
def _is_null(r: str) -> str:
    return f"{r} = 'null'"


def _is_bool(r: str) -> str:
    return f"{r} IN ('true', 'false')"


def _is_num(r: str) -> str:
    return f"match({r}, '^-?[0-9]')"


def _is_str(r: str) -> str:
    return f"startsWith({r}, '\"')"


def _str(r: str) -> str:
    return f"substring({r}, 2, length({r}) - 2)"


def _num(r: str) -> str:
    return f"toFloat64OrNull({r})"


def _bool(r: str) -> str:
    return f"if({_is_bool(r)}, {r} = 'true', NULL)"


def _members(t):
    return t.types if isinstance(t, mi.UnionType) else (t,)


def _str_literal(t) -> bool:
    return isinstance(t, mi.LiteralType) and all(isinstance(x, str) for x in t.values)


def _is_int_type(t) -> bool:
    return isinstance(t, mi.IntType) or (isinstance(t, mi.LiteralType) and not _str_literal(t))


def _int_keys(info: mi.StructType) -> set[str]:
    """Every key, at any level, whose value is an integer (its spelling is checked in the text)."""
    found = set()
    for f in info.fields:
        for t in _members(f.type):
            if _is_int_type(t):
                found.add(f.name)
            elif isinstance(t, mi.StructType):
                found |= _int_keys(t)
            elif isinstance(t, mi.ListType) and isinstance(t.item_type, mi.StructType):
                found |= _int_keys(t.item_type)
    return found


def _micros(year, month, day, hour, minute, second, frac, sign, oh, om) -> str:
    """Microseconds since the epoch of a civil time and offset (H. Hinnant's days_from_civil)."""
    y = f"({year} - ({month} <= 2))"
    era = f"intDiv({y}, 400)"
    yoe = f"({y} - {era} * 400)"
    doy = f"(intDiv(153 * ({month} + if({month} > 2, -3, 9)) + 2, 5) + {day} - 1)"
    doe = f"({yoe} * 365 + intDiv({yoe}, 4) - intDiv({yoe}, 100) + {doy})"
    days = f"({era} * 146097 + {doe} - 719468)"
    return (
        f"(toInt64({days}) * 86400000000 + (toInt64({hour}) * 3600 + {minute} * 60 + {second}) * 1000000 + {frac}"
        f" - {sign} * (toInt64({oh}) * 3600 + {om} * 60) * 1000000)"
    )


class _Gen:
    """Builds the parsing SQL of one contract from its record type (msgspec.inspect) and invariants."""

    def __init__(self, contract: Contract):
        self.contract = contract
        self.topic = contract.topic
        self.is_decision = contract.topic == names.TOPIC_DECISIONS
        self.info = mi.type_info(contract.event_type)
        self.lists: dict[str, mi.StructType] = {}  # list-of-struct fields (attempts)
        self.objects: dict[str, mi.StructType] = {}  # single struct fields (breaker, device_stats)
        self.times: list[str] = []
        for f in self.info.fields:
            for t in _members(f.type):
                if isinstance(t, mi.StructType):
                    self.objects[f.name] = t
                elif isinstance(t, mi.ListType) and isinstance(t.item_type, mi.StructType):
                    self.lists[f.name] = t.item_type
                elif isinstance(t, mi.DateTimeType):
                    self.times.append(f.name)
        self.int_keys = sorted(_int_keys(self.info))

    @property
    def fields(self):
        return self.info.fields

    # -- type checks on a value's JSON text ----------------------------------------------------
    def check(self, r: str, t, name: str | None = None) -> str:
        """SQL: the JSON text `r` is a valid value of msgspec type `t` (`name`: the top-level
        field, for struct and time values, parsed once per row under its own aliases)."""
        if isinstance(t, mi.UnionType):
            return "(" + " OR ".join(self.check(r, m, name) for m in t.types) + ")"
        if isinstance(t, mi.NoneType):
            return _is_null(r)
        if isinstance(t, mi.BoolType):
            return _is_bool(r)
        if isinstance(t, (mi.IntType, mi.FloatType)):
            parts = [_is_num(r)]
            if isinstance(t, mi.IntType):
                parts.append(f"{_num(r)} = floor({_num(r)})")
            for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
                bound = getattr(t, attr)
                if bound is not None:
                    parts.append(f"{_num(r)} {op} {bound!r}")
            return "(" + " AND ".join(parts) + ")"
        if isinstance(t, mi.StrType):
            parts = [_is_str(r)]
            if t.min_length is not None:
                parts.append(f"lengthUTF8({_str(r)}) >= {t.min_length}")
            if t.max_length is not None:
                parts.append(f"lengthUTF8({_str(r)}) <= {t.max_length}")
            if t.pattern is not None:
                parts.append(f"match({_str(r)}, {_q(t.pattern.replace(chr(92) + 'Z', chr(92) + 'z'))})")
            return "(" + " AND ".join(parts) + ")"
        if isinstance(t, mi.LiteralType):
            if _str_literal(t):
                return f"({_is_str(r)} AND {_str(r)} IN ({', '.join(_q(x) for x in t.values)}))"
            return f"({_is_num(r)} AND {_num(r)} IN ({', '.join(repr(x) for x in t.values)}))"
        if isinstance(t, mi.DateTimeType):
            return f"({_is_str(r)} AND isNotNull(tus_{name}))"
        if isinstance(t, mi.StructType):
            return f"(startsWith({r}, '{{') AND {self.struct_check(f'o_{name}', t)})"
        if isinstance(t, mi.ListType):
            parts = [f"startsWith({r}, '[')", f"arrayAll(e -> startsWith(e, '{{'), a_{name})"]
            if t.min_length is not None:
                parts.append(f"length(a_{name}) >= {t.min_length}")
            if t.max_length is not None:
                parts.append(f"length(a_{name}) <= {t.max_length}")
            parts.append(f"arrayAll(o -> {self.struct_check('o', t.item_type)}, l_{name})")
            return "(" + " AND ".join(parts) + ")"
        raise TypeError(f"no SQL for contract type {t!r}")

    def struct_check(self, m: str, t: mi.StructType) -> str:
        """SQL: the Map(String, String) `m` (an object's members) is a valid `t`."""
        known = ", ".join(_q(f.name) for f in t.fields)
        parts = [f"arrayAll(k -> k IN ({known}), mapKeys({m}))"]
        for f in t.fields:
            check = self.check(f"{m}[{_q(f.name)}]", f.type)
            parts.append(check if f.required else f"(NOT mapContains({m}, {_q(f.name)}) OR {check})")
        return "(" + " AND ".join(parts) + ")"

    # -- the per-row computation -----------------------------------------------------------------
    def parse_lets(self) -> list[str]:
        lets = [
            f"length(value) > {MAX_MESSAGE_BYTES} AS too_large",
            "NOT too_large AND isValidJSON(value) AS is_json",
            "is_json AND startsWith(trimLeft(value), '{') AS is_object",
            "if(is_object, JSONExtractKeysAndValuesRaw(value), []) AS kv",
            "CAST(kv, 'Map(String, String)') AS m",
        ]
        for name in self.lists:
            lets.append(f"if(startsWith(m[{_q(name)}], '['), JSONExtractArrayRaw(m[{_q(name)}]), []) AS a_{name}")
            lets.append(f"arrayMap(e -> JSONExtractKeysAndValuesRaw(e), a_{name}) AS lkv_{name}")
            lets.append(f"arrayMap(x -> CAST(x, 'Map(String, String)'), lkv_{name}) AS l_{name}")
        for name in self.objects:
            lets.append(
                f"if(startsWith(m[{_q(name)}], '{{'), JSONExtractKeysAndValuesRaw(m[{_q(name)}]), []) AS okv_{name}"
            )
            lets.append(f"CAST(okv_{name}, 'Map(String, String)') AS o_{name}")
        for name in self.times:
            lets.extend(self.time_lets(name))
        v1 = "m['schema_version'] = '1'" if self.is_decision else "false"
        lets.append(f"{v1} AS v1")
        return lets

    def time_lets(self, name: str) -> list[str]:
        """`tus_<name>`: microseconds since the epoch of an RFC 3339 time in the plain shape, NULL
        when it is no valid time (a string in another shape is routed to Python)."""
        g = f"tg_{name}"
        lets = [f"extractGroups({_str(f'm[{_q(name)}]')}, {_q(_TIME_RE)}) AS {g}"]
        parts = ("year", "month", "day", "hour", "minute", "second")
        lets += [f"toInt64OrZero({g}[{i + 1}]) AS t{p}_{name}" for i, p in enumerate(parts)]
        year, month, day, hour, minute, second = (f"t{p}_{name}" for p in parts)
        frac = f"toInt64OrZero(rightPad(substring({g}[7], 2), 6, '0'))"
        zone = f"{g}[8]"
        sign = f"multiIf({zone} = 'Z', 0, startsWith({zone}, '-'), -1, 1)"
        oh, om = f"toInt64OrZero(substring({zone}, 2, 2))", f"toInt64OrZero(substring({zone}, 5, 2))"
        leap = f"(({year} % 4 = 0 AND {year} % 100 != 0) OR {year} % 400 = 0)"
        mdays = f"[31, if({leap}, 29, 28), 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][{month}]"
        valid = (
            f"length({g}) = 8 AND {year} >= 1 AND {month} BETWEEN 1 AND 12 AND {day} BETWEEN 1 AND {mdays} "
            f"AND {hour} <= 23 AND {minute} <= 59 AND {second} <= 59 AND {oh} <= 23 AND {om} <= 59"
        )
        us = _micros(year, f"least(greatest({month}, 1), 12)", day, hour, minute, second, frac, sign, oh, om)
        lets.append(f"if({valid}, {us}, NULL) AS tus_{name}")
        return lets

    def field_rules(self, f) -> list[tuple[str, str]]:
        """(condition, rule) pairs of one field, in contract.validate's order: the first condition
        that holds names the field's broken rule(s) (an SQL array); none holds when it is valid."""
        r = f"m[{_q(f.name)}]"
        present = f"mapContains(m, {_q(f.name)})"
        if f.required:
            out = [(f"NOT {present}", f"[{_q('schema.required.' + f.name)}]")]
        else:
            out = [(f"NOT {present}", "[]")]
        if self.is_decision and f.name in V2_ONLY_FIELDS:
            out.append(("v1", f"[{_q('schema.unknown.' + f.name)}]"))
        invalid_rule = "schema.version" if f.name == "schema_version" else f"schema.invalid.{f.name}"
        out.append((f"NOT {self.check(r, f.type, f.name)}", f"[{_q(invalid_rule)}]"))
        if self.is_decision and f.name == "reason":
            reasons = ", ".join(_q(x) for x in V2_ONLY_REASONS)
            out.append((f"v1 AND {_str(r)} IN ({reasons})", "['schema.invalid.reason']"))
        if self.is_decision and f.name == "attempts":  # an attempt's v2 additions in a v1 event
            added = " OR ".join(f"mapContains(o, {_q(k)})" for k in V2_ONLY_ATTEMPT_FIELDS)
            out.append((f"v1 AND arrayExists(o -> {added}, l_attempts)", "['schema.invalid.attempts']"))
        out.extend(self.range_rules(f.name))
        return out

    def ok_lets(self) -> list[str]:
        """`ok_<field>` per field and `valid`: the message breaks no rule (every row computes these;
        only the invalid ones compute their rule lists, in `rule_lets`)."""
        lets = []
        for f in self.fields:
            pairs = self.field_rules(f)
            absent_ok = "true" if not f.required else "false"
            conditions = [c for c, _ in pairs[1:]]
            lets.append(
                f"if(NOT mapContains(m, {_q(f.name)}), {absent_ok}, NOT ({' OR '.join(conditions)})) AS ok_{f.name}"
            )
        known = ", ".join(_q(f.name) for f in self.fields)
        invariants = [f"NOT ({inv.sql})" for inv in self.contract.invariants]
        lets.append(
            "NOT too_large AND is_object AND "
            + " AND ".join(f"ok_{f.name}" for f in self.fields)
            + f" AND arrayAll(k -> k IN ({known}), kv.1)"
            + "".join(f" AND ifNull({x}, false)" for x in invariants)
            + " AS valid"
        )
        return lets

    def rule_lets(self) -> tuple[list[str], str]:
        """Per field its broken rules (`r_<field>`), the unknown keys, the invariants; returns
        (aliases, the SQL of the whole rule list, in contract.validate's order)."""
        lets = []
        for f in self.fields:
            branches = [f"{c}, {rule}" for c, rule in self.field_rules(f)]
            lets.append(f"CAST(multiIf({', '.join(branches)}, []), 'Array(String)') AS r_{f.name}")
        known = ", ".join(_q(f.name) for f in self.fields)
        lets.append(
            f"arrayMap(k -> concat('schema.unknown.', k), arrayFilter(k -> k NOT IN ({known}), kv.1)) AS r_unknown"
        )
        invariants = []
        for inv in self.contract.invariants:
            guard = " AND ".join(f"empty(r_{name})" for name in inv.fields)
            invariants.append(f"if({guard} AND ({inv.sql}), [{_q(inv.rule)}], [])")
        rules = (
            f"arrayConcat({', '.join(f'r_{f.name}' for f in self.fields)}, r_unknown, {', '.join(invariants) or '[]'})"
        )
        lets.append(
            "multiIf(too_large, ['json.too_large'], NOT is_json, ['json.invalid'], NOT is_object, "
            f"['json.not_object'], {rules}) AS rules"
        )
        return lets, rules

    def range_rules(self, name: str) -> list[tuple[str, str]]:
        """(condition, rules) of the schema.range rules of a type-valid field (contract._range_rules)."""
        if name in self.times:
            lo, hi = _epoch_us(EVENT_TIME_MIN), _epoch_us(EVENT_TIME_MAX)
            return [(f"NOT (tus_{name} BETWEEN {lo} AND {hi})", f"['schema.range.{name}']")]
        if not self.is_decision:
            return []
        r = f"m[{_q(name)}]"
        if name in DECISION_MAXIMA:
            return [(f"ifNull({_num(r)} > {DECISION_MAXIMA[name]!r}, false)", f"['schema.range.{name}']")]
        if name == "attempts":
            over = f"{_num(chr(111) + '[' + _q('latency_ms') + ']')} > {ATTEMPT_LATENCY_MAX!r}"
            return [(f"arrayExists(o -> {over}, l_attempts)", "['schema.range.attempts.latency_ms']")]
        if name == "device_stats":
            over = {k: f"ifNull({_num(f'o_{name}[{_q(k)}]')} > {hi!r}, false)" for k, hi in DEVICE_STATS_MAXIMA.items()}
            parts = [f"if({c}, ['schema.range.device_stats.{k}'], [])" for k, c in over.items()]
            return [(" OR ".join(over.values()), f"arrayConcat({', '.join(parts)})")]
        return []

    def python_expr(self) -> str:
        """True when the Python validator must decide (see the module docstring)."""
        ints = "|".join(re.escape(k) for k in self.int_keys)
        float_int = _q(f'"({ints})"\\s*:\\s*-?[0-9]+[.eE]')
        # a number past Int64 (the warehouse's JSON reader drops it), or a key spaced from its colon
        odd_text = _q('[:,\\[]\\s*-?[0-9]{19}|"\\s+:')
        odd_time = "".join(
            f" OR (startsWith(m[{_q(n)}], '\"') AND NOT match({_str(f'm[{_q(n)}]')}, {_q(_TIME_RE)}))"
            for n in self.times
        )
        keys = ["length(kv)"]
        distinct = ["arrayUniq(kv.1) = length(kv)"]
        for name in self.lists:
            keys.append(f"arraySum(x -> length(x), lkv_{name})")
            distinct.append(f"arrayAll(x -> arrayUniq(x.1) = length(x), lkv_{name})")
        for name in self.objects:
            keys.append(f"length(okv_{name})")
            distinct.append(f"arrayUniq(okv_{name}.1) = length(okv_{name})")
        # Without a backslash no string can hold a quote, and with no space before a colon every key
        # is exactly one `":`: their count must be the keys found at the levels the contract knows.
        colons = "countSubstrings(value, '\":')"
        return (
            "NOT too_large AND (NOT is_json"
            f" OR countSubstrings(value, '[') + countSubstrings(value, '{{') > {MAX_SQL_BRACKETS}"
            " OR position(value, '\\\\') > 0"
            f" OR match(value, {float_int}) OR match(value, {odd_text})"
            f"{odd_time}"
            f" OR (is_object AND ({colons} != {' + '.join(keys)} OR NOT ({' AND '.join(distinct)}))))"
        )

    # -- the facts columns -------------------------------------------------------------------------
    def value(self, r: str, t) -> str:
        """SQL: the column value of the JSON text `r` of type `t` (NULL for null or absent)."""
        kinds = [m for m in _members(t) if not isinstance(m, mi.NoneType)]
        t = kinds[0]
        if isinstance(t, mi.BoolType):
            return _bool(r)
        if isinstance(t, (mi.IntType, mi.FloatType)) or (isinstance(t, mi.LiteralType) and not _str_literal(t)):
            return _num(r)
        return f"if({_is_str(r)}, {_str(r)}, NULL)"

    def columns(self) -> list[tuple[str, str]]:
        """(facts column, SQL expression), in the facts table's order, lineage excluded."""
        _, columns, _ = FACTS[self.topic]
        fields = {f.name: f for f in self.fields}
        out = []
        for col in columns:
            if col in ("kafka_topic", "kafka_partition", "kafka_offset"):
                continue
            if col in self.times:
                ms = f"intDiv(ifNull(tus_{col}, 0) - if(ifNull(tus_{col}, 0) < 0, 999, 0), 1000)"  # floor
                out.append((col, f"fromUnixTimestamp64Milli(toInt64({ms}), 'UTC')"))
            elif col in fields:
                out.append((col, self.value(f"m[{_q(col)}]", fields[col].type)))
            elif col.startswith("attempt_"):
                sub = {"attempt_levels": "level", "attempt_outcomes": "outcome", "attempt_latency_ms": "latency_ms"}[
                    col
                ]
                t = next(x.type for x in self.lists["attempts"].fields if x.name == sub)
                out.append((col, f"arrayMap(o -> assumeNotNull({self.value(f'o[{_q(sub)}]', t)}), l_attempts)"))
            else:
                prefix, _, sub = col.partition("_")
                name = {"breaker": "breaker", "device": "device_stats"}[prefix]
                t = next(x.type for x in self.objects[name].fields if x.name == sub)
                out.append((col, self.value(f"o_{name}[{_q(sub)}]", t)))
        return out

    def _select(self, lets: list[str], cols: list[str], where: str = "") -> str:
        """`cols` over the landed rows of one batch and topic, the `lets` (`expr AS name`) computed in
        nested subqueries, one per level of dependency. The warehouse's analyzer copies an alias's
        expression into every place that names it, so aliases of aliases in one SELECT grow the query
        tree multiplicatively (measured: 9 MB of tree from 23 KB of SQL, 0.6 s to plan); a column of
        the subquery below is read, not copied."""
        level: dict[str, int] = {}
        by_level: list[list[str]] = []
        for let in lets:
            expr, name = let.rsplit(" AS ", 1)
            used = [level[n] for n in level if re.search(rf"\b{re.escape(n)}\b", expr)]
            level[name] = max(used, default=-1) + 1
            while len(by_level) <= level[name]:
                by_level.append([])
            by_level[level[name]].append(let)
        sql = "SELECT * FROM $landing WHERE batch = {batch:String} AND kafka_topic = " + _q(self.topic) + where
        for group in by_level:
            sql = "SELECT *,\n  " + ",\n  ".join(group) + f"\nFROM ({sql})"
        return "SELECT " + ",\n  ".join(cols) + f"\nFROM ({sql})"

    def parsed_select(self) -> str:
        """SELECT over `$landing` for one batch and topic: the staging row of each message (its
        facts columns, `valid`, and `python`: the Python validator decides)."""
        lets = [
            *self.parse_lets(),
            *(f"{expr} AS {col}" for col, expr in self.columns()),
            *self.ok_lets(),
            f"{self.python_expr()} AS python",
        ]
        cols = [
            "batch",
            "kafka_topic",
            "kafka_partition",
            "kafka_offset",
            "landed",
            "python",
            "valid",
            "kafka_key",
            "kafka_timestamp",
            *(col for col, _ in self.columns()),
            "now() AS staged_at",
        ]
        return self._select(lets, cols)

    def rules_select(self, where: str = "") -> str:
        """SELECT over `$landing`: every broken rule of each message (and `python`)."""
        rule_lets, _ = self.rule_lets()
        lets = [
            *self.parse_lets(),
            *(f"{expr} AS {col}" for col, expr in self.columns()),
            *rule_lets,
            f"{self.python_expr()} AS python",
        ]
        cols = [
            "kafka_topic",
            "kafka_partition",
            "kafka_offset",
            "kafka_key",
            "kafka_timestamp",
            "value",
            "python",
            "rules",
        ]
        return self._select(lets, cols, where)


# -- the statements --------------------------------------------------------------------------------
_GEN = {topic: _Gen(contract) for topic, contract in CONTRACTS.items()}
PARSED_SELECT = {topic: gen.parsed_select() for topic, gen in _GEN.items()}
# The staging table of each topic is named after a hash of its parser: a contract change makes a
# new one (created by the loader on its first use), so no migration has to follow the generated SQL.
STAGING = {
    topic: f"landing_{names.TOPIC_TABLE[topic]}_{hashlib.sha256(sql.encode()).hexdigest()[:12]}"
    for topic, sql in PARSED_SELECT.items()
}
STAGING_TTL = "staged_at + INTERVAL 1 DAY"  # what a killed run left behind is removed by merges


def staging_table(topic: str) -> str:
    """The staging table of `topic`, as SQL names it."""
    return f"{names.DATABASE}.{STAGING[topic]}"


CREATE_STAGING = {
    topic: named(
        f"landing_create_staging_{names.TOPIC_TABLE[topic]}",
        "CREATE TABLE IF NOT EXISTS $staging ENGINE = MergeTree PARTITION BY batch "
        "ORDER BY (kafka_partition, kafka_offset) TTL "
        + STAGING_TTL
        + " EMPTY AS\n"
        + PARSED_SELECT[topic].replace("{batch:String}", "''"),
        staging=staging_table(topic),
    )
    for topic in CONTRACTS
}
PARSE = {
    topic: named(
        f"landing_parse_{names.TOPIC_TABLE[topic]}",
        "INSERT INTO $staging\n" + sql + _SETTINGS,
        staging=staging_table(topic),
    )
    for topic, sql in PARSED_SELECT.items()
}
LOADABLE = "batch = {batch:String} AND NOT python AND valid"
# Per partition of one batch: rows loaded, rows quarantined, offsets for the Python validator, and
# the months the loaded rows span (an insert may touch at most 100 partitions of a facts table).
SUMMARY = {
    topic: named(
        f"landing_summary_{names.TOPIC_TABLE[topic]}",
        "SELECT kafka_partition, countIf(NOT python AND valid AND NOT landed), "
        "countIf(NOT python AND NOT valid AND NOT landed), groupArrayIf(kafka_offset, python), "
        "groupUniqArrayIf(toYYYYMM(event_time), NOT python AND valid AND NOT landed) "
        "FROM $staging WHERE batch = {batch:String} GROUP BY kafka_partition",
        staging=staging_table(topic),
    )
    for topic in CONTRACTS
}


def _facts(topic: str) -> str:
    table, columns, _ = FACTS[topic]
    cols = ", ".join(columns)
    return named(
        f"landing_facts_{table}",
        "INSERT INTO $facts (" + cols + ")\nSELECT " + cols + " FROM $staging WHERE " + LOADABLE + " AND NOT landed",
        facts=names.TABLES[table],
        staging=staging_table(topic),
    )


FACTS_INSERT = {topic: _facts(topic) for topic in CONTRACTS}
# The rules of the messages the parse found invalid (few: only these compute their rule lists).
QUARANTINE_RULES = {
    topic: named(
        f"landing_quarantine_rules_{names.TOPIC_TABLE[topic]}",
        "SELECT kafka_partition, kafka_offset, rules FROM ("
        + gen.rules_select(
            " AND (kafka_partition, kafka_offset) IN (SELECT kafka_partition, kafka_offset FROM $staging "
            "WHERE batch = {batch:String} AND NOT valid AND NOT python AND NOT landed)"
        )
        + ")"
        + _SETTINGS,
        staging=staging_table(topic),
    )
    for topic, gen in _GEN.items()
}
# What a batch leaves in the landing and staging tables, removed once its rows are routed.
DROP_LANDED = named("landing_drop", "ALTER TABLE $landing DROP PARTITION {batch:String}")
DROP_STAGED = {
    topic: named(
        f"landing_drop_staging_{names.TOPIC_TABLE[topic]}",
        "ALTER TABLE $staging DROP PARTITION {batch:String}",
        staging=staging_table(topic),
    )
    for topic in CONTRACTS
}
# The rules as the SQL parser reports them for one value (tests: the two validators agree).
CHECK = {
    topic: named(
        f"landing_check_{names.TOPIC_TABLE[topic]}",
        "SELECT kafka_offset, python, rules FROM (" + gen.rules_select() + ") ORDER BY kafka_offset" + _SETTINGS,
    )
    for topic, gen in _GEN.items()
}
