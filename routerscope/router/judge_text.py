"""Free text against the cloud's answer: the facts token overlap cannot see (docs/judge.md#free-text).

Token F1 rewards shared words: "No, the store is not open" shares most of them with "Yes, the store is open",
"20 million" with "2 million", "rejected" with "approved". Before any agreement by F1, `fact_mismatch` compares
what the two answers *state*:

* **polarity** — a negation (`not`, `no`, `never`, `n't`, `cannot`, `none`, …; courtesy phrases such as
  `no problem` aside) on one side only;
* **numbers** — a number the answer states (digits or words, with `thousand`/`million`/`billion`, `%`) that
  the reference does not;
* **dates and times of day** — a weekday, month, relative day (`today`, `tomorrow`, `next week`), part of the day
  (`morning`, `night`) or clock time in the answer that the reference does not state (`this afternoon` counts as
  today);
* **outcomes** — an outcome word (`approved`, `rejected`, `cancelled`, `delayed`, `open`, `closed`, …) in the
  answer the reference does not use;
* **named entities** — a capitalised word inside a sentence (a name, a place) that neither the reference nor the
  request contains.

An answer may state less than the reference (a summary omits); it may not state something else. And an answer
that talks to its grader (`SYSTEM:`, `ignore previous instructions`, `answer ACCEPTABLE`, a verdict word) or
refuses or asks for the text instead of answering is not acceptable: instructions inside an answer are text to
be judged, never followed."""

from __future__ import annotations

import re
import unicodedata

NEGATIONS = frozenset(
    "not no never none nobody nothing neither nor cannot can't won't don't doesn't didn't isn't aren't wasn't "
    "weren't hasn't haven't hadn't shouldn't wouldn't couldn't mustn't without unable".split()
)
COURTESY = re.compile(
    r"\b(no problem|no worries|no trouble|not a problem|not at all|no doubt|never mind|not only|"
    r"don't mention it|do not mention it|don't worry|no need to thank me|no need to apologi[sz]e)\b",
    re.IGNORECASE,
)
# Greetings' fillers that state no fact: "how can I help you today", "have a great day"
FILLER = re.compile(
    r"\b((how )?(can|may) i (help|assist) you( with anything)? today|have a (great|nice|good|wonderful|lovely) "
    r"(day|evening|weekend|morning|afternoon|night))\b",
    re.IGNORECASE,
)
WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
MONTHS = "january february march april may june july august september october november december".split()
RELATIVE_DAYS = {"today": "day0", "tonight": "day0", "tomorrow": "day+1", "yesterday": "day-1"}
DAY_PARTS = ("morning", "afternoon", "evening", "night", "noon", "midnight", "tonight")
RELATIVE_SPANS = ("week", "month", "year", "weekend")
OUTCOMES = frozenset(
    "approved rejected accepted declined denied granted cancelled canceled postponed delayed confirmed refused "
    "passed failed won lost open opened closed shut succeeded refunded suspended banned allowed forbidden "
    "increased decreased rose fell positive negative safe unsafe available unavailable".split()
)
SCALES = {"thousand": 1e3, "k": 1e3, "million": 1e6, "m": 1e6, "billion": 1e9, "bn": 1e9, "trillion": 1e12}
NUMBER_WORDS = {
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
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
    "hundred": 100,
    "half": 0.5,
    "dozen": 12,
    "once": 1,
    "twice": 2,
    "first": 1,
    "second": 2,
    "third": 3,
}
GRADER_TALK = re.compile(
    r"(\b(system|assistant|grader|judge|evaluator)\s*:|ignore (all |the )?(previous|above|prior)|"
    r"\b(acceptable|unacceptable)\b|\bverdict\b|\bgrade (this|me)\b|\b(grade|score|rating)\s*[:=]|"
    r"\b(note|message) to the (grader|judge|evaluator|reviewer)\b|\bdisregard\b|</?\s*(system|instruction)s?\s*>)",
    re.IGNORECASE,
)
REFUSAL = re.compile(
    r"(\bas an ai\b|\blanguage model\b|\bi (cannot|can't|am unable to|won't) (help|answer|summari[sz]e|do|reply)|"
    r"\bplease provide\b|\bprovide the (text|message)\b|\bi do not have (access|a schedule)\b|"
    r"\bi'm sorry, but\b|\bwhat (text|message) (do|would) you\b)",
    re.IGNORECASE,
)
_WORD = re.compile(r"\d+(?:[.,]\d+)*%?|[^\W\d_]+(?:['’][^\W\d_]+)*", re.UNICODE)
_CLOCK = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s*(am|pm)\b|\b(\d{1,2}):(\d{2})\b", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?;:])\s+|\n+")


def _words(text: str) -> list[str]:
    text = unicodedata.normalize("NFKC", text).replace("’", "'")
    return _WORD.findall(text)


def polarity(text: str) -> bool:
    """Whether the text negates something (courtesy phrases aside)."""
    stripped = COURTESY.sub(" ", text)
    return any(w.lower() in NEGATIONS or w.lower().endswith("n't") for w in _words(stripped))


def numbers(text: str) -> set[float]:
    """The numbers stated, a scale word multiplying the number before it (`2 million` → 2e6); clock times apart."""
    text = _CLOCK.sub(" ", text)
    found: list[float] = []
    words = [w.lower() for w in _words(text)]
    for i, w in enumerate(words):
        value: float | None = None
        if w[0].isdigit():
            try:
                value = float(w.rstrip("%").replace(",", ""))
            except ValueError:
                value = None
        elif w in NUMBER_WORDS and w not in ("first", "second", "once"):  # ordinals and `once` are rarely amounts
            value = float(NUMBER_WORDS[w])
        if value is None:
            continue
        scale = SCALES.get(words[i + 1], 1.0) if i + 1 < len(words) else 1.0
        found.append(value * scale)
    return set(found)


UNITS = {u + suffix: u for u in ("second", "minute", "hour", "day", "week", "month", "year") for suffix in ("", "s")}
# a quantity stated without a number: `a day` is one day, `a couple of weeks` is no number of days
VAGUE = {"a": "1", "an": "1", "couple": "couple", "few": "few", "several": "several", "many": "many", "some": "some"}


def quantities(text: str) -> set[str]:
    """Durations stated with their quantity, `2 day` for "two days" or "2 days", `couple week` for "a couple of
    weeks": a unit whose word before (`of` skipped) is a number or a vague quantity."""
    words = [w.lower() for w in _words(_CLOCK.sub(" ", text))]
    found = set()
    for i, w in enumerate(words):
        if w not in UNITS or i == 0:
            continue
        j = i - 2 if words[i - 1] == "of" and i >= 2 else i - 1
        before = words[j]
        if before in VAGUE:
            found.add(f"{VAGUE[before]} {UNITS[w]}")
            continue
        amount = numbers(before) if before[0].isdigit() or before in NUMBER_WORDS else set()
        if amount:
            found.add(f"{min(amount):g} {UNITS[w]}")
    return found


def clock_times(text: str) -> set[int]:
    out = set()
    for m in _CLOCK.finditer(text):
        if m.group(3):
            hour, minute = int(m.group(1)) % 12, int(m.group(2) or 0)
            hour += 12 if m.group(3).lower() == "pm" else 0
        else:
            hour, minute = int(m.group(4)), int(m.group(5))
        out.add(hour * 60 + minute)
    return out


def dates(text: str) -> set[str]:
    """Weekdays, months, relative days and spans, parts of the day, clock times, normalised."""
    words = [w.lower() for w in _words(text)]
    found: set[str] = set()
    for i, w in enumerate(words):
        before = words[i - 1] if i else ""
        if w in WEEKDAYS:
            found.add(("next " if before == "next" else "last " if before == "last" else "") + w)
        elif w in MONTHS and (w != "may" or _may_is_month(words, i)):
            found.add(w)
        elif w in RELATIVE_DAYS:
            found.add(RELATIVE_DAYS[w])
        elif w in RELATIVE_SPANS and before in ("next", "last", "this"):
            found.add(f"{before} {w}")
        if w in DAY_PARTS:
            found.add("part:" + w)
            if before == "this" or w == "tonight":
                found.add("day0")
    found |= {f"clock:{m}" for m in clock_times(text)}
    return found


def _may_is_month(words: list[str], i: int) -> bool:
    """`may` the month, not the verb: after `in`/`of`/`early`/`late`/a number, or before a number or the end."""
    before = words[i - 1] if i else ""
    after = words[i + 1] if i + 1 < len(words) else ""
    return (
        before in ("in", "of", "early", "late", "mid", "since", "until")
        or before[:1].isdigit()
        or (not after or after[:1].isdigit())
    )


def outcomes(text: str) -> set[str]:
    return {w.lower() for w in _words(text) if w.lower() in OUTCOMES}


def entities(text: str) -> set[str]:
    """Capitalised words that do not open a sentence (names, places), lower-cased; `I` and all-caps words aside."""
    found = set()
    for sentence in _SENTENCE.split(text):
        words = _words(sentence)
        for w in words[1:]:
            if w[0].isupper() and not w.isupper() and w.lower() not in WEEKDAYS and w.lower() not in MONTHS:
                found.add(w.lower())
    return found


def grader_talk(answer: str) -> bool:
    return bool(GRADER_TALK.search(answer))


def refusal(answer: str) -> bool:
    return bool(REFUSAL.search(answer))


def fact_mismatch(answer: str, reference: str, request_text: str = "") -> str:
    """The first fact the answer states that the reference does not ('' when none): `negation`, `number:20000000`,
    `date:friday`, `outcome:rejected`, `entity:lyon`."""
    answer, reference = FILLER.sub(" ", answer), FILLER.sub(" ", reference)
    if polarity(answer) != polarity(reference):
        return "negation"
    clock_hours = {(m // 60) % 12 for m in clock_times(reference)}
    extra_numbers = {  # "until nine" states what "until 9 pm" does
        n
        for n in numbers(answer) - numbers(reference)
        if not (n == int(n) and 0 <= n <= 24 and int(n) % 12 in clock_hours)
    }
    if extra_numbers:
        return f"number:{min(extra_numbers):g}"
    extra_quantities = quantities(answer) - quantities(reference)  # "a couple of weeks" is not "two days"
    if extra_quantities:
        return f"quantity:{sorted(extra_quantities)[0]}"
    hours = {int(n) % 12 for n in numbers(reference) if n == int(n) and 0 <= n <= 24}
    extra_dates = {  # "after 5 pm" states what "after five" does, when the reference gives the hour alone
        d for d in dates(answer) - dates(reference) if not (d.startswith("clock:") and (int(d[6:]) // 60) % 12 in hours)
    }
    if extra_dates:
        return f"date:{sorted(extra_dates)[0]}"
    extra_outcomes = outcomes(answer) - outcomes(reference)
    if extra_outcomes:
        return f"outcome:{sorted(extra_outcomes)[0]}"
    known = {w.lower() for w in _words(reference + " " + request_text)}
    extra_entities = entities(answer) - known
    if extra_entities:
        return f"entity:{sorted(extra_entities)[0]}"
    return ""
