"""The SQL parser: raw Kafka messages parsed and validated by the warehouse, in one insert per topic.

The loader's `sql` parser inserts each batch's messages of a topic, untouched (batch, partition,
offset, value bytes, `landed`), into that topic's input table (Null engine: it keeps nothing). A
chain of materialized views does the rest within that insert: the parse view reads every message
once into a second Null table of parsed rows (the facts columns, `valid`: no rule broken, `python`:
the Python validator decides), and from there the facts view writes the valid rows not loaded
before to the facts table, the ledger view the valid rows to the ledger, and the verdicts view lists
the other messages in `landing_verdicts` (migration 0018). The views persist (created by the loader
on its first batch, named after a hash of their SQL like the Python parser's input tables), so a
batch costs its insert, planned once, and no `INSERT … SELECT`; the insert carries the run-scoped
token, which reaches the views' inserts (`deduplicate_blocks_in_dependent_materialized_views`). The
listed messages go through the loader's Python writer: the Python validator names an invalid
message's rules (the same rules the SQL finds: `CHECK`, and the property test that runs it). The SQL
is generated from the contract's field annotations (msgspec.inspect) and its invariants' `sql`: one
definition of the rules, with the same names.

**One parse per message.** `JSONExtract(value, 'Tuple(<field> Dynamic, …)')` reads every field of
the contract by name in one pass, each value typed as JSON typed it (a `Dynamic`: Int64 for `1`,
Float64 for `1.5`, String, Bool, NULL); lists of objects and objects come as `Map(String, Dynamic)`.
Every rule reads these values (typed readings of each computed once: `n_`, `s_`, `b_`), never the
text again; `JSONExtractKeys` lists the top-level keys (presence, null or not; unknown keys), and a
container's JSON kind is the first character after its key. String members stay strings
(`PARSE_SETTINGS`: no date or number inference from strings).

**Where SQL cannot be exact, Python decides.** A message goes to the Python validator (`python` = 1)
when the warehouse's reading of it could differ from msgspec's: it is not valid JSON to the
warehouse (msgspec tells json.invalid from json.too_deep), it has more than a few brackets (nesting
depth), a backslash (escapes, lone surrogates), an integer field spelled like a float (`1.0`), a
number of 19 digits or more, a timestamp not in the plain RFC 3339 shape, a container's key more than
once in the text, or more `":` pairs than keys at the levels the contract knows (a repeated key, or
an object where none belongs). The router's own messages are none of these.

Short-circuit evaluation is off (`PARSE_SETTINGS`): with it on, the warehouse recomputed the shared
parts of each lazily evaluated branch, and the parse ran 50x slower.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import msgspec.inspect as mi

from routerscope.contract.events import V2_ONLY_ATTEMPT_FIELDS, V2_ONLY_FIELDS, V2_ONLY_REASONS
from routerscope.contract.validation import (
    ATTEMPT_LATENCY_MAX,
    CONTRACTS,
    DECISION_MAXIMA,
    DEVICE_STATS_MAXIMA,
    EVENT_TIME_MAX,
    EVENT_TIME_MIN,
    MAX_MESSAGE_BYTES,
    Contract,
)
from routerscope.core import names
from routerscope.warehouse.schema import LEDGER_COLUMNS, RECORD_ID, TOPIC_TABLES
from routerscope.warehouse.sql import STORED_AT, hashed_chain, identifier, named

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
PARSE_SETTINGS = {
    "precise_float_parsing": 1,
    "short_circuit_function_evaluation": "disable",
    # a string member stays a string: the typed extraction would otherwise read times and dates
    # (and, with the first, numbers) out of strings
    "input_format_try_infer_dates": 0,
    "input_format_try_infer_datetimes": 0,
    "input_format_json_try_infer_numbers_from_strings": 0,
    # the analyzer's pass deriving comparisons implied by AND chains took most of the planning time
    # of the decisions' parse (run for every insert: a view's query is planned with each)
    "optimize_and_compare_chain": 0,
    # merging the expression steps of the parse's nested levels into one took 40 % of its planning (0.09 of
    # 0.21 s an insert, docs/loader.md); they run as they are written instead
    "query_plan_merge_expressions": 0,
    # compiling the parse's expressions (each once it has run three times) cost more CPU over a load than
    # it saved (docs/loader.md)
    "compile_expressions": 0,
}
# ... spelled in each parsing statement itself (no session settings to set and restore around it).
_SETTINGS = " SETTINGS " + ", ".join(f"{k} = {v!r}" for k, v in PARSE_SETTINGS.items())

_WORD = re.compile(r"\b\w+\b")  # the names an expression may read
_TIME_RE = r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)


def _q(text: str) -> str:
    """A SQL string literal (for constants of the contract, never for data)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _epoch_us(t: datetime) -> int:
    return (t - _EPOCH) // _ONE_US


# A value is one member of the message as the warehouse's single typed extraction returns it: a
# `Dynamic` keeping the JSON type (Int64 or UInt64 for an integer literal, Float64 for one with a
# fraction or exponent, String, Bool, NULL for null and for absent), or, inside an object of the
# contract, an element of a `Map(String, Dynamic)`. Strings hold no escape (a message with a
# backslash goes to Python), so a string's value is its text.
def _is_null(r: str) -> str:
    return f"isNull({r})"


def _is_bool(r: str) -> str:
    return f"isNotNull(dynamicElement({r}, 'Bool'))"


def _is_num(r: str) -> str:
    return (
        f"(isNotNull(dynamicElement({r}, 'Int64')) OR isNotNull(dynamicElement({r}, 'Float64'))"
        f" OR isNotNull(dynamicElement({r}, 'UInt64')))"
    )


def _is_str(r: str) -> str:
    return f"isNotNull(dynamicElement({r}, 'String'))"


def _str(r: str) -> str:
    return f"ifNull(dynamicElement({r}, 'String'), '')"


def _num(r: str) -> str:
    return (
        f"coalesce(dynamicElement({r}, 'Float64'), toFloat64(dynamicElement({r}, 'Int64')),"
        f" toFloat64(dynamicElement({r}, 'UInt64')))"
    )


def _bool(r: str) -> str:
    return f"dynamicElement({r}, 'Bool')"


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
        # Typed readings of the top-level values and of the objects' members, each computed once per
        # row under its own alias (`n_`: the number, `s_`: the string, `b_`: the boolean) and read by
        # every rule and column that needs it: an expression written out at each use made a query tree
        # that took seconds to plan.
        self.aliases: dict[tuple[str, str], str] = {}
        for f in self.info.fields:
            if f.name in self.lists:
                continue
            if f.name in self.objects:
                for sub in self.objects[f.name].fields:
                    self._register(f"o_{f.name}[{_q(sub.name)}]", f"{f.name}__{sub.name}", sub.type)
            else:
                self._register(f"v_{f.name}", f.name, f.type)

    def _register(self, r: str, base: str, t) -> None:
        kinds = set()
        for m in _members(t):
            if isinstance(m, (mi.IntType, mi.FloatType)) or (isinstance(m, mi.LiteralType) and not _str_literal(m)):
                kinds.add("n")
            elif isinstance(m, (mi.StrType, mi.LiteralType, mi.DateTimeType)):
                kinds.add("s")
            elif isinstance(m, mi.BoolType):
                kinds.add("b")
        if base == "schema_version":
            kinds.add("b")  # contract.validate: `schema_version == 1` holds for true as well
        for kind in sorted(kinds):
            self.aliases[(r, kind)] = f"{kind}_{base}"

    def alias_lets(self) -> list[str]:
        make = {"n": _num, "s": lambda r: f"dynamicElement({r}, 'String')", "b": _bool}
        return [f"{make[kind](r)} AS {alias}" for (r, kind), alias in self.aliases.items()]

    def is_num(self, r: str) -> str:
        alias = self.aliases.get((r, "n"))
        return f"isNotNull({alias})" if alias else _is_num(r)

    def num(self, r: str) -> str:
        return self.aliases.get((r, "n")) or _num(r)

    def is_str(self, r: str) -> str:
        alias = self.aliases.get((r, "s"))
        return f"isNotNull({alias})" if alias else _is_str(r)

    def str(self, r: str) -> str:
        alias = self.aliases.get((r, "s"))
        return f"ifNull({alias}, '')" if alias else _str(r)

    def string(self, r: str) -> str:
        """The string, NULL when the value is none."""
        return self.aliases.get((r, "s")) or f"dynamicElement({r}, 'String')"

    def bool(self, r: str) -> str:
        return self.aliases.get((r, "b")) or _bool(r)

    def is_bool(self, r: str) -> str:
        alias = self.aliases.get((r, "b"))
        return f"isNotNull({alias})" if alias else _is_bool(r)

    @property
    def fields(self):
        return self.info.fields

    def index(self, name: str) -> int:
        """The top-level field's bit in `kmask` (the keys present), from 1."""
        return next(i for i, f in enumerate(self.fields, start=1) if f.name == name)

    def ref(self, name: str) -> str:
        """The alias of a top-level field's extracted value: `v_` (a Dynamic), `o_` (an object's
        members, Map(String, Dynamic)), `l_` (a list of objects, Array(Map(String, Dynamic)))."""
        return ("l_" if name in self.lists else "o_" if name in self.objects else "v_") + name

    def extract_type(self) -> str:
        """The one typed extraction of a message: every top-level field of the contract by name."""
        parts = []
        for f in self.fields:
            if f.name in self.lists:
                parts.append(f"{f.name} Array(Map(String, Dynamic))")
            elif f.name in self.objects:
                parts.append(f"{f.name} Map(String, Dynamic)")
            else:
                parts.append(f"{f.name} Dynamic")
        return "Tuple(" + ", ".join(parts) + ")"

    # -- type checks on an extracted value -------------------------------------------------------
    def check(self, r: str, t, name: str | None = None) -> str:
        """SQL: the extracted value `r` is a valid value of msgspec type `t` (`name`: the top-level
        field, for container and time values, whose JSON kind and parsed time have their own aliases)."""
        if isinstance(t, mi.UnionType):
            return "(" + " OR ".join(self.check(r, m, name) for m in t.types) + ")"
        if isinstance(t, mi.NoneType):
            if name in self.objects or name in self.lists:
                return f"c_{name} = 'n'"
            return _is_null(r)
        if isinstance(t, mi.BoolType):
            return self.is_bool(r)
        if isinstance(t, (mi.IntType, mi.FloatType)):
            parts = [self.is_num(r)]
            if isinstance(t, mi.IntType):
                parts.append(f"{self.num(r)} = floor({self.num(r)})")
            for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
                bound = getattr(t, attr)
                if bound is not None:
                    parts.append(f"{self.num(r)} {op} {bound!r}")
            return "(" + " AND ".join(parts) + ")"
        if isinstance(t, mi.StrType):
            parts = [self.is_str(r)]
            if t.min_length is not None:
                parts.append(f"lengthUTF8({self.str(r)}) >= {t.min_length}")
            if t.max_length is not None:
                parts.append(f"lengthUTF8({self.str(r)}) <= {t.max_length}")
            if t.pattern is not None:
                parts.append(f"match({self.str(r)}, {_q(t.pattern.replace(chr(92) + 'Z', chr(92) + 'z'))})")
            return "(" + " AND ".join(parts) + ")"
        if isinstance(t, mi.LiteralType):
            if _str_literal(t):
                return f"({self.is_str(r)} AND {self.str(r)} IN ({', '.join(_q(x) for x in t.values)}))"
            return f"({self.is_num(r)} AND {self.num(r)} IN ({', '.join(repr(x) for x in t.values)}))"
        if isinstance(t, mi.DateTimeType):
            return f"({self.is_str(r)} AND isNotNull(tus_{name}))"
        if isinstance(t, mi.StructType):
            return f"(c_{name} = '{{' AND {self.struct_check(f'o_{name}', t)})"
        if isinstance(t, mi.ListType):
            # a member that is no list extracts as [] and one that is no object as {}: both fail the
            # length or the required members below, as msgspec fails them
            parts = [f"c_{name} = '['"]
            if t.min_length is not None:
                parts.append(f"length(l_{name}) >= {t.min_length}")
            if t.max_length is not None:
                parts.append(f"length(l_{name}) <= {t.max_length}")
            parts.append(f"arrayAll(o -> {self.struct_check('o', t.item_type)}, l_{name})")
            return "(" + " AND ".join(parts) + ")"
        raise TypeError(f"no SQL for contract type {t!r}")

    def struct_check(self, m: str, t: mi.StructType) -> str:
        """SQL: the Map(String, Dynamic) `m` (an object's members) is a valid `t`."""
        known = ", ".join(_q(f.name) for f in t.fields)
        parts = [f"arrayAll(k -> k IN ({known}), mapKeys({m}))"]
        for f in t.fields:
            check = self.check(f"{m}[{_q(f.name)}]", f.type)
            present = f"mapContains({m}, {_q(f.name)})"
            parts.append(f"({present} AND {check})" if f.required else f"(NOT {present} OR {check})")
        return "(" + " AND ".join(parts) + ")"

    # -- the per-row computation -----------------------------------------------------------------
    def parse_lets(self) -> list[str]:
        """One typed extraction of the whole message (`t`) and its top-level keys (`keys`: which
        fields are present, null or not, and which keys the contract does not know); every rule
        reads these, never the text again, except the JSON kind of a container member (`c_<name>`:
        its first character, read from the text after its key) and the screening for Python."""
        names_ = [f.name for f in self.fields]
        if len(names_) > 62:
            raise ValueError("a contract of more than 62 fields does not fit the presence mask")
        index = ", ".join(str(i) for i in range(1, len(names_) + 1))
        lets = [
            f"length(value) > {MAX_MESSAGE_BYTES} AS too_large",
            "NOT too_large AND isValidJSON(value) AS is_json",
            "is_json AND startsWith(trimLeft(value), '{') AS is_object",
            f"JSONExtract(if(is_object, value, '{{}}'), {_q(self.extract_type())}) AS ev",
            "if(is_object, JSONExtractKeys(value), []) AS keys",
            f"arrayMap(k -> transform(k, [{', '.join(_q(n) for n in names_)}], [{index}], 0), keys) AS kix",
            "arrayFold((acc, i) -> bitOr(acc, bitShiftLeft(toUInt64(1), i)), kix, toUInt64(0)) AS kmask",
        ]
        for f in self.fields:
            lets.append(f"tupleElement(ev, {_q(f.name)}) AS {self.ref(f.name)}")
        for name in [*self.lists, *self.objects]:
            kind = _q(f'"{name}":' + r"\s*(.)")
            lets.append(f"extract(value, {kind}) AS c_{name}")
        lets.extend(self.alias_lets())
        for name in self.times:
            lets.extend(self.time_lets(name))
        v1 = f"ifNull({self.num('v_schema_version')} = 1 OR {self.bool('v_schema_version')}, false)"
        lets.append(f"{v1 if self.is_decision else 'false'} AS v1")
        return lets

    def time_lets(self, name: str) -> list[str]:
        """`tus_<name>`: microseconds since the epoch of an RFC 3339 time in the plain shape, NULL
        when it is no valid time (a string in another shape is routed to Python)."""
        g = f"tg_{name}"
        lets = [f"extractGroups({self.str(f'v_{name}')}, {_q(_TIME_RE)}) AS {g}"]
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

    def present(self, name: str) -> str:
        return f"bitTest(kmask, {self.index(name)})"

    def field_rules(self, f) -> list[tuple[str, str]]:
        """(condition, rule) pairs of one field, in contract.validate's order: the first condition
        that holds names the field's broken rule(s) (an SQL array); none holds when it is valid."""
        r = self.ref(f.name)
        present = self.present(f.name)
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
            out.append((f"v1 AND {self.str(r)} IN ({reasons})", "['schema.invalid.reason']"))
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
            lets.append(f"if(NOT {self.present(f.name)}, {absent_ok}, NOT ({' OR '.join(conditions)})) AS ok_{f.name}")
        invariants = [f"NOT ({inv.sql})" for inv in self.contract.invariants]
        lets.append(
            "NOT too_large AND is_object AND "
            + " AND ".join(f"ok_{f.name}" for f in self.fields)
            + " AND NOT has(kix, 0)"
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
        lets.append("arrayMap(k -> concat('schema.unknown.', k), arrayFilter((k, i) -> i = 0, keys, kix)) AS r_unknown")
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
        r = self.ref(name)
        if name in DECISION_MAXIMA:
            return [(f"ifNull({self.num(r)} > {DECISION_MAXIMA[name]!r}, false)", f"['schema.range.{name}']")]
        if name == "attempts":
            over = f"{self.num(chr(111) + '[' + _q('latency_ms') + ']')} > {ATTEMPT_LATENCY_MAX!r}"
            return [(f"arrayExists(o -> ifNull({over}, false), l_attempts)", "['schema.range.attempts.latency_ms']")]
        if name == "device_stats":
            over = {
                k: f"ifNull({self.num(f'o_{name}[{_q(k)}]')} > {hi!r}, false)" for k, hi in DEVICE_STATS_MAXIMA.items()
            }
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
            f" OR ({self.is_str(f'v_{n}')} AND NOT match({self.str(f'v_{n}')}, {_q(_TIME_RE)}))" for n in self.times
        )
        # a container's kind is read after its key in the text: that key must be there once
        containers = "".join(
            f" OR countSubstrings(value, {_q(chr(34) + n + chr(34) + ':')}) > 1" for n in [*self.lists, *self.objects]
        )
        keys = ["length(keys)"]
        distinct = [
            "length(keys) = bitCount(kmask) - bitTest(kmask, 0) + countEqual(kix, 0)",
            "arrayUniq(arrayFilter((k, i) -> i = 0, keys, kix)) = countEqual(kix, 0)",
        ]
        for name in self.lists:
            keys.append(f"arraySum(x -> length(x), l_{name})")
            distinct.append(f"arrayAll(x -> arrayUniq(mapKeys(x)) = length(x), l_{name})")
        for name in self.objects:
            keys.append(f"length(o_{name})")
            distinct.append(f"arrayUniq(mapKeys(o_{name})) = length(o_{name})")
        # Without a backslash no string can hold a quote, and with no space before a colon every key
        # is exactly one `":`: their count must be the keys found at the levels the contract knows.
        colons = "countSubstrings(value, '\":')"
        return (
            "NOT too_large AND (NOT is_json"
            f" OR countSubstrings(value, '[') + countSubstrings(value, '{{') > {MAX_SQL_BRACKETS}"
            " OR position(value, '\\\\') > 0"
            f" OR match(value, {float_int}) OR match(value, {odd_text})"
            f"{odd_time}{containers}"
            f" OR (is_object AND ({colons} != {' + '.join(keys)} OR NOT ({' AND '.join(distinct)}))))"
        )

    # -- the facts columns -------------------------------------------------------------------------
    def value(self, r: str, t) -> str:
        """SQL: the column value of the extracted value `r` of type `t` (NULL for null or absent)."""
        kinds = [m for m in _members(t) if not isinstance(m, mi.NoneType)]
        t = kinds[0]
        if isinstance(t, mi.BoolType):
            return self.bool(r)
        if isinstance(t, (mi.IntType, mi.FloatType)) or (isinstance(t, mi.LiteralType) and not _str_literal(t)):
            return self.num(r)
        return self.string(r)

    def columns(self) -> list[tuple[str, str]]:
        """(facts column, SQL expression), in the facts table's order, lineage excluded."""
        _, columns = TOPIC_TABLES[self.topic]
        fields = {f.name: f for f in self.fields}
        out = []
        for col in columns:
            if col in ("kafka_topic", "kafka_partition", "kafka_offset"):
                continue
            if col in self.times:
                ms = f"intDiv(ifNull(tus_{col}, 0) - if(ifNull(tus_{col}, 0) < 0, 999, 0), 1000)"  # floor
                out.append((col, f"fromUnixTimestamp64Milli(toInt64({ms}), 'UTC')"))
            elif col in fields:
                out.append((col, self.value(self.ref(col), fields[col].type)))
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

    def _select(self, lets: list[str], cols: list[str], source: str) -> str:
        """`cols` over the rows of `source` (a table, or a `$name` that `named` spells: a table or a constant subquery
        among its fragments, with the columns INPUT_COLUMNS), the `lets` (`expr AS name`) computed in nested
        subqueries, one per level of dependency. The warehouse's analyzer copies an alias's expression into every
        place that names it, so aliases of aliases in one SELECT grow the query tree multiplicatively (measured: 9
        MB of tree from 23 KB of SQL, 0.6 s to plan); a column of the subquery below is read, not copied. Each level
        passes on only what a level above it reads: carrying every column through every level (`SELECT *`) took the
        analyzer seconds for the decisions' dozen levels."""
        level: dict[str, int] = {}
        by_level: list[list[tuple[str, str]]] = []
        uses: dict[str, set[str]] = {}
        known = set(INPUT_COLUMNS)
        for let in lets:
            expr, name = let.rsplit(" AS ", 1)
            uses[name] = set(_WORD.findall(expr)) & known
            level[name] = max((level.get(n, -1) for n in uses[name]), default=-1) + 1
            known.add(name)
            while len(by_level) <= level[name]:
                by_level.append([])
            by_level[level[name]].append((let, name))
        final = {n for c in cols for n in _WORD.findall(c)} & known
        # needed[k]: the names read at level k or above (or by `cols`)
        needed: list[set[str]] = [set() for _ in by_level]
        above = set(final)
        for k in range(len(by_level) - 1, -1, -1):
            for _, name in by_level[k]:
                above |= uses[name]
            needed[k] = set(above)
        sql = "SELECT * FROM " + identifier(source, "source", placeholder=True)
        available = list(INPUT_COLUMNS)
        for k, group in enumerate(by_level):
            later = needed[k + 1] if k + 1 < len(by_level) else final
            keep = [n for n in available if n in later]
            sql = "SELECT " + ",\n  ".join([*keep, *(let for let, _ in group)]) + f"\nFROM ({sql})"
            available = [*keep, *(name for _, name in group)]
        return "SELECT " + ",\n  ".join(cols) + f"\nFROM ({sql})"

    def parsed_select(self, source: str = "$input") -> str:
        """The parse view's SELECT: each message's facts columns, `valid` (it breaks no rule) and
        `python` (the Python validator decides), with its batch, coordinates, bytes and `landed`."""
        lets = [
            *self.parse_lets(),
            *(f"{expr} AS {col}" for col, expr in self.columns()),
            *self.ok_lets(),
            f"{self.python_expr()} AS python",
        ]
        cols = [*INPUT_COLUMNS, "python", "valid", *(col for col, _ in self.columns())]
        return self._select(lets, cols, source)

    def rules_select(self, source: str, extra: tuple[str, ...] = (), extra_cols: tuple[str, ...] = ()) -> str:
        """Every broken rule of each message of `source` (and `python`): run only over the few
        messages the parse found invalid or left to Python, and by the tests over any."""
        rule_lets, _ = self.rule_lets()
        lets = [
            *self.parse_lets(),
            *(f"{expr} AS {col}" for col, expr in self.columns()),
            *rule_lets,
            f"{self.python_expr()} AS python",
            *extra,
        ]
        cols = ["batch", "kafka_partition", "kafka_offset", "landed", "python", "rules"]
        cols += extra_cols
        return self._select(lets, cols, source)


# -- the statements --------------------------------------------------------------------------------
# The rows the loader inserts, per topic, into that topic's input table (Null engine: it keeps nothing).
INPUT_COLUMNS = ("batch", "kafka_partition", "kafka_offset", "value", "landed")
_INPUT_TYPES = ("String", "UInt32", "UInt64", "String", "Bool")
_GEN = {topic: _Gen(contract) for topic, contract in CONTRACTS.items()}


def _ddl(topic: str) -> list[tuple[str, str]]:
    """(kind, statement) of the chain one insert runs through: the input table, the parse view
    into a second Null table holding the parsed rows, and from there the facts view (valid rows
    not landed before), the ledger view (valid rows) and the verdicts view (the rest, by their
    coordinates)."""
    gen = _GEN[topic]
    table, columns = TOPIC_TABLES[topic]
    topic_sql = _q(topic)
    facts = ", ".join(f"{topic_sql} AS kafka_topic" if c == "kafka_topic" else c for c in columns)
    if table == names.TABLE_DECISIONS:
        facts += f", {STORED_AT} AS ingested_at"
    renamed = {"kafka_topic": f"{topic_sql} AS kafka_topic", "record_id": f"{RECORD_ID[topic]} AS record_id"}
    ledger = ", ".join(renamed.get(c, c) for c in LEDGER_COLUMNS)
    structure = ", ".join(f"{c} {t}" for c, t in zip(INPUT_COLUMNS, _INPUT_TYPES))
    return [
        ("input", f"CREATE TABLE IF NOT EXISTS $input ({structure}) ENGINE = Null"),
        ("parsed", "CREATE TABLE IF NOT EXISTS $parsed ENGINE = Null EMPTY AS\n" + gen.parsed_select()),
        ("parse_view", "CREATE MATERIALIZED VIEW IF NOT EXISTS $parse_view TO $parsed AS\n" + gen.parsed_select()),
        (
            "facts_view",
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS $facts_view TO $facts AS SELECT {facts} FROM $parsed "
            "WHERE valid AND NOT python AND NOT landed",
        ),
        (
            "ledger_view",
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS $ledger_view TO $loaded_messages AS SELECT {ledger} "
            "FROM $parsed WHERE valid AND NOT python",
        ),
        (
            "verdicts_view",
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS $verdicts_view TO $landing_verdicts AS SELECT batch, "
            f"{topic_sql} AS kafka_topic, kafka_partition, kafka_offset, landed, python FROM $parsed "
            "WHERE python OR NOT valid",
        ),
    ]


def _chain(topic: str) -> tuple[str, list[str]]:
    table = TOPIC_TABLES[topic][0]
    return hashed_chain(f"landing_{table}", f"landing_{table}", _ddl(topic), facts=names.TABLES[table])


_CHAINS = {topic: _chain(topic) for topic in CONTRACTS}
INPUT_TABLE = {topic: chain[0] for topic, chain in _CHAINS.items()}
CREATE = {topic: chain[1] for topic, chain in _CHAINS.items()}
# Settings of the insert into an input table; its views run under them.
INSERT_SETTINGS = {
    **PARSE_SETTINGS,
    # the run-scoped token reaches the views' inserts (see routerscope/warehouse/ingest/loader.py on tokens)
    "deduplicate_blocks_in_dependent_materialized_views": 1,
}
# The messages of one batch and topic the parse did not load: (partition, offset, landed, python).
VERDICTS = named(
    "landing_verdicts",
    "SELECT DISTINCT kafka_partition, kafka_offset, landed, python FROM $landing_verdicts "
    "WHERE batch = {batch:String} AND kafka_topic = {topic:String}",
)
# The rules and verdicts the SQL reaches for any messages put in `$landing` (migration 0014): the
# statement the property test holds against the Python validator (tests/integration/test_ingest_sql.py).
CHECK = {
    topic: named(
        f"landing_check_{names.TOPIC_TABLE[topic]}",
        "SELECT kafka_offset, python, valid, rules FROM ("
        + gen.rules_select("$batch_rows", extra=tuple(gen.ok_lets()), extra_cols=("valid",))
        + ") ORDER BY kafka_offset"
        + _SETTINGS,
        {"batch_rows": "(SELECT * FROM $landing WHERE batch = {batch:String} AND kafka_topic = " + _q(topic) + ")"},
    )
    for topic, gen in _GEN.items()
}
