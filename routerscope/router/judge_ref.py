"""Reference-based judging of structured answers: a label, extracted fields, a tool call, each compared with the
cloud's answer to the same request (docs/judge.md#structured-answers).

Form alone cannot tell the right label, city or argument from a wrong one that is just as well formed, so the
rules here reject on what they can see and accept only on a match with the reference:

* **classification** — not a declared label: not acceptable; the cloud's label (normalised) equal: acceptable;
  another declared label: not acceptable; no usable reference: no verdict;
* **extraction** — exactly the declared keys (a missing, null, blank, wrongly typed or extra key: not
  acceptable), every string value *grounded* as whole tokens of the request, in order (`"a"`, `"in"` or `"Mon"`
  are no city or day of "… in Paris on Monday"), never a field's own name; then per field, normalised equality
  with the reference: all equal → acceptable; a value whose tokens are a strict part of the reference's
  (`Monday` for `next Monday`) → no verdict; any other difference (Paris for Lyon, the origin for the
  destination) → not acceptable; no usable reference → no verdict;
* **tool calls** — one call of a declared, whitelisted tool with exactly its declared, typed arguments (else not
  acceptable; a non-finite or absurd number is not a number of the request), and the cloud's tool; then per
  argument: numbers equal (`500` is not `5`), clock times equal after normalisation (`19:00` is not `7 am`),
  other strings by their content words (`opening hours of the museum` = `museum opening hours`): a word of the
  request the reference does not use, or no word in common → not acceptable; a strict part of the reference, or
  words the request never used → no verdict.

Normalisation: lower case, Unicode NFKC, whitespace collapsed, surrounding punctuation dropped. What normalisation
would hide is looked at first: a string value with an invisible or control character the request does not hold
is not acceptable, one with a compatibility form (full-width letters, a ligature) gets no verdict."""

from __future__ import annotations

import math
import re
import unicodedata

from routerscope.router import judge_text

WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
STOP_WORDS = frozenset(
    "a an the of in on at to for from by with and or is are be what when where which who how me my your our "
    "please find look up lookup get show tell about s".split()
)
_TIME = re.compile(r"^\s*(\d{1,2})(?:[:.h](\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)?\s*$", re.IGNORECASE)
_NUMBER_WORDS = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "fifteen": 15,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "ninety": 90,
    "hundred": 100,
}


def tokens(text: str) -> list[str]:
    """Lower-case word tokens (NFKC; apostrophes inside a word kept)."""
    words = (t.replace("’", "'") for t in WORD.findall(unicodedata.normalize("NFKC", text).lower()))
    return [t.removesuffix("'s") for t in words]  # "tomorrow's first train" names tomorrow


def norm(value) -> str:
    """A value's normalised text: its tokens joined by single spaces (numbers as their shortest repr)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return repr(float(value)).removesuffix(".0")
    return " ".join(tokens(str(value)))


def content(text: str) -> set[str]:
    return {t for t in tokens(text) if t not in STOP_WORDS}


def grounded(value: str, request_text: str) -> bool:
    """Whether `value`'s tokens occur in the request as whole tokens, consecutively (never a substring of a word)."""
    want, have = tokens(value), tokens(request_text)
    if not want:
        return False
    return any(have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1))


def clock(value) -> int | None:
    """Minutes after midnight of a clock time (`7 am`, `07:00`, `7:00 pm`, `19h30`); None when it is none."""
    if not isinstance(value, str):
        return None
    m = _TIME.match(value)
    if not m:
        return None
    hour, minute, half = int(m.group(1)), int(m.group(2) or 0), (m.group(3) or "").lower().replace(".", "")
    if minute > 59 or hour > 24 or (half and not 1 <= hour <= 12):
        return None
    if half == "pm" and hour != 12:
        hour += 12
    elif half == "am" and hour == 12:
        hour = 0
    if not half and not m.group(2):
        return None  # a bare number is no clock time
    return (hour % 24) * 60 + minute


def request_numbers(request_text: str) -> set[float]:
    """The numbers a request states, in digits or words."""
    found = set()
    for t in tokens(request_text):
        if t in _NUMBER_WORDS:
            found.add(float(_NUMBER_WORDS[t]))
        else:
            try:
                found.add(float(t))
            except ValueError:
                pass
    return found


def unseen_characters(value: str, request_text: str) -> tuple[bool | None, str]:
    """A string value carrying what normalisation would hide and the request does not hold: an invisible or
    control character (`Paris` + a zero-width space reaches the next system as another city) → not acceptable,
    `invisible`; a compatibility form (full-width `Ｐａｒｉｓ`, a ligature) → no verdict, `confusable`;
    else (True, "")."""
    for ch in value:
        if ch in request_text or ch in " \t":
            continue
        if unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cn", "Cs"):
            return False, "invisible"
        if unicodedata.normalize("NFKC", ch) != ch:
            return None, "confusable"
    return True, ""


def compare_labels(answer_key: str, allowed: dict[str, str], reference_key: str | None) -> tuple[bool | None, str]:
    """Classification against the reference (keys normalised by the judge's label key)."""
    if answer_key not in allowed:
        return False, "not_a_declared_label"
    if reference_key is None or reference_key not in allowed:
        return None, "no_reference"
    if reference_key != answer_key:
        return False, f"cloud_says:{allowed[reference_key][:40]}"
    return True, ""


def _value_verdict(name: str, got: str, want: str | None, request_text: str) -> tuple[bool | None, str]:
    if want is None:
        return None, f"no_reference:{name}"
    if norm(got) == norm(want):
        return True, ""
    if set(tokens(got)) < set(tokens(want)):  # `Monday` for `next Monday`: maybe the same, maybe not
        return None, f"partial:{name}"
    return False, f"differs:{name}"


def compare_fields(
    value: dict, fields: dict[str, str], request_text: str, reference: dict | None, typed
) -> tuple[bool | None, str]:
    """Extraction: `value` the device's parsed object; `reference` the cloud's (None: none usable);
    `typed(value, kind)` the judge's JSON type check."""
    for name, kind in fields.items():
        v = value.get(name)
        if name not in value or v is None or (isinstance(v, str) and not v.strip()):
            return False, f"missing:{name}"
        if not typed(v, kind):
            return False, f"type:{name}"
    extra = sorted(set(value) - set(fields))
    if extra:
        return False, f"undeclared:{extra[0][:40]}"
    names = {norm(k) for k in fields}
    pending = ""
    for name, v in value.items():
        if isinstance(v, str):
            ok, why = unseen_characters(v, request_text)
            if ok is False:
                return False, f"{why}:{name}"
            if ok is None:
                pending = pending or f"{why}:{name}"
        if isinstance(v, str) and (not grounded(v, request_text) or norm(v) in names or not content(v)):
            return False, f"ungrounded:{name}"
        if isinstance(v, float) and not math.isfinite(v):
            return False, f"not_finite:{name}"
    if reference is None or any(k not in reference for k in fields):
        ok, why = unique_in_request(value, fields, request_text)
        return (None, pending) if ok is True and pending else (ok, why)
    for name in fields:
        ok, why = _value_verdict(name, value[name], reference[name], request_text)
        if ok is False:
            return False, why
        if ok is None:
            pending = pending or why
    return (None, pending) if pending else (True, "")


def compare_args(args: dict, ref_args: dict | None, request_text: str) -> tuple[bool | None, str]:
    """A tool call's arguments (already checked for their declared names and types) against the reference's."""
    for name, v in args.items():
        if isinstance(v, float) and not math.isfinite(v):
            return False, f"not_finite:{name}"
        if isinstance(v, int | float) and not isinstance(v, bool) and abs(v) > 10**9:
            return False, f"absurd:{name}"
    pending = ""
    for name, v in args.items():
        if isinstance(v, str):
            ok, why = unseen_characters(v, request_text)
            if ok is False:
                return False, f"{why}:{name}"
            if ok is None:
                pending = pending or f"{why}:{name}"
    if ref_args is None:
        return None, "no_reference"
    request = set(tokens(request_text))
    for name, v in args.items():
        want = ref_args.get(name)
        if want is None:
            pending = pending or f"no_reference:{name}"
            continue
        same = same_arg(v, want, request)
        if same is False:
            return False, f"differs:{name}"
        if same is None:
            pending = pending or f"partial:{name}"  # a part of the reference's, or words the request never used
    return (None, pending) if pending else (True, "")


def same_arg(v, want, request: set[str]) -> bool | None:
    """One argument against the reference's value: True the same, False different, None in part (a part of the
    reference's words, or words the request (`request`, its tokens) never used)."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return isinstance(want, int | float) and float(v) == float(want)
    if isinstance(v, bool) or not isinstance(v, str):
        return v == want
    got_clock, want_clock = clock(v), clock(want)
    if got_clock is not None or want_clock is not None:
        return got_clock == want_clock
    if norm(v) == norm(want if isinstance(want, str) else str(want)):
        return True
    a, r = content(v), content(str(want))
    if a == r and a:
        return True
    if (a - r) & request or not (a & r):  # a word of the request the cloud did not use, or nothing shared
        return False
    return None


def unique_in_request(value: dict, fields: dict[str, str], request_text: str) -> tuple[bool | None, str]:
    """Extraction without a reference: acceptable only where the request leaves no choice — a field for a date
    (`DATE_FIELD_WORDS` in its name) holds the request's one date expression (`next Monday`, `today`; `Monday` for
    `next Monday` is not), any other field the request's one proper name (a capitalised word inside a sentence:
    `Paris` in "… a table in Paris on Friday", not where it also names Lyon); anything else is no verdict (the
    grounding rules above have already rejected what they can)."""
    request_dates = judge_text.dates(request_text)
    names = set(judge_text.entities(request_text))
    for name in fields:
        v = value[name]
        if not isinstance(v, str):
            return None, "no_reference"
        if any(word in name.lower() for word in DATE_FIELD_WORDS):  # a field for a date takes the date
            if len(request_dates) != 1 or judge_text.dates(v) != request_dates:
                return None, f"no_reference:{name}"
        elif len(names) != 1 or {t.lower() for t in tokens(v)} != names:  # any other, the one name
            return None, f"no_reference:{name}"
    return True, ""


# a field whose name holds one of these takes a date expression (`day`, `date`, `start_time`); any other, a name
DATE_FIELD_WORDS = ("day", "date", "time", "when", "week", "month")
