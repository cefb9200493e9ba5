"""The simulated requests (SIMULATED): the task mix, what the users ask, and the ground truth the simulated
reviewers and the simulated replay report about answers (shadow agreement, acceptability, determinism)."""

from __future__ import annotations

import math
import random

TASKS = {  # task type: (share of traffic, confidence shape (CONFIDENCE), expected output tokens (range))
    "intent_classify": (0.35, "classify", (2, 8)),
    "short_reply": (0.25, "qa", (20, 80)),
    "short_summary": (0.15, "summary", (60, 200)),
    "slot_extract": (0.10, "classify", (15, 50)),
    "long_summary": (0.05, "generate", (200, 600)),
    "multi_step_tools": (0.05, "generate", (100, 400)),
    "tool_call": (0.05, "classify", (30, 100)),
    "code_snippet": (0.05, "generate", (20, 80)),  # in shadow mode: the cloud answers, the device is compared
}
# The seed's (docs/sources.md#seed-000) calibration buckets of confidence: [0, .45) [.45, .65) [.65, .85) [.85, 1].
BUCKETS = (0.0, 0.45, 0.65, 0.85, 1.0)
# Per shape: the share of answers in each bucket (uniform within it), and the pass rate by confidence
# (linear between the knots). "qa" is docs/sources.md#seed-000's QA task as published (18/27/34/21 %, passing
# 11/58/89/97 %); classification is confident, generation is not; "summary" is the QA shape whose top
# bucket is over-confident (65 % pass above 0.85: the calibration view flags it).
CONFIDENCE = {
    "qa": ((0.18, 0.27, 0.34, 0.21), ((0.0, 0.02), (0.3, 0.12), (0.5, 0.45), (0.6, 0.75), (0.75, 0.9), (1.0, 0.98))),
    "summary": ((0.18, 0.27, 0.34, 0.21), ((0.0, 0.02), (0.3, 0.1), (0.55, 0.4), (0.65, 0.85), (0.85, 0.95))),
    "classify": (
        (0.08, 0.10, 0.22, 0.60),
        ((0.0, 0.02), (0.45, 0.04), (0.6, 0.15), (0.7, 0.6), (0.8, 0.92), (1.0, 0.99)),
    ),
    "generate": ((0.35, 0.30, 0.25, 0.10), ((0.0, 0.02), (0.45, 0.3), (0.65, 0.6), (0.85, 0.85), (1.0, 0.95))),
}
# The classification shape's curve moves with the task type's threshold (calibrated at 0.70): + this shift.
SHIFT = {"slot_extract": 0.05, "tool_call": 0.10}
# The deadline a gateway gives each task type (ms): long generations get longer ones.
DEADLINES = {"long_summary": (8000, 15000, 20000), "multi_step_tools": (8000, 15000, 20000)}
DEFAULT_DEADLINES = (6000, 8000, 8000, 12000)  # docs/sources.md#seed-000: a gateway SLA of "整体 8s"
OVERCONFIDENT = {"summary": (0.85, 0.65)}  # shape: (from this confidence, the pass rate)
L1_LIFT = (0.03, 0.05)  # a degraded retry's confidence: the first try's plus N(mean, sd) (the same answer, shorter)
SHADOW_TASKS = ("code_snippet",)
INPUT_TOKENS = {  # log-uniform within the range (most prompts are short, a few long); others: 20-480
    "long_summary": (9000, 9000),
    "code_snippet": (20, 1000),
    "intent_classify": (20, 160),  # one message to classify: short and concentrated (no long tail)
    "slot_extract": (20, 240),
    "tool_call": (30, 300),
}
# What the simulated users ask, per task type: kept in the request-text store (never in events) so
# the offline replay can re-run a request through the real device model.
TEXTS = {
    "intent_classify": (
        "Classify the intent of this message with one word (play_music, set_alarm, weather, call, other): {}",
        ("play some jazz", "wake me up at seven", "will it rain tomorrow", "call my sister", "turn it up"),
    ),
    "slot_extract": (
        'Extract the city and the day as a JSON object with keys "city" and "day". Output only JSON: {}',
        ("a table in Paris on Friday", "flights to Tokyo next Monday", "weather in Oslo today"),
    ),
    "short_reply": ("Reply in one short sentence: {}", ("thanks for the help!", "are you free later?", "good morning")),
    "short_summary": (
        "Summarise in one sentence: {}",
        (
            "The meeting moved to Thursday because the room was booked; bring the budget draft.",
            "The package left the warehouse this morning and should arrive in two days.",
        ),
    ),
    "tool_call": (
        'Output only a JSON object with keys "tool" and "query" to look up: {}',
        ("the opening hours of the museum", "the exchange rate of the euro", "tomorrow's first train"),
    ),
    "code_snippet": ("Write one line of Python that {}.", ("reverses a list named xs", "sums the numbers 1 to 10")),
    "long_summary": ("Summarise this long report: {}", ("(a long quarterly report)",)),
    "multi_step_tools": ("Plan the tools and steps to {}.", ("book a trip and tell my team",)),
}
# The chance that 3 sampled re-runs of one request agree (SIMULATED determinism, docs/sources.md#seed-004-2).
DETERMINISM = {
    "intent_classify": 0.97,
    "slot_extract": 0.93,
    "tool_call": 0.9,
    "short_reply": 0.55,
    "short_summary": 0.6,
    "code_snippet": 0.7,
    "long_summary": 0.3,
    "multi_step_tools": 0.3,
}


def request_text(rng: random.Random, task_type: str) -> str:
    template, subjects = TEXTS[task_type]
    return template.format(rng.choice(subjects))


def shadow_agreement(input_tokens: int) -> float:
    """How often the device's shadow answer matches the cloud's: worse on longer inputs."""
    return 0.93 if input_tokens < 128 else 0.82 if input_tokens < 512 else 0.58


def input_tokens(rng: random.Random, task_type: str) -> int:
    """A request's input length: log-uniform over its task type's range (most prompts are short)."""
    low, high = INPUT_TOKENS.get(task_type, (20, 480))
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def draw_confidence(rng: random.Random, task_type: str, pending: dict, degraded: bool) -> float:
    """The device's confidence for this request: drawn from its task type's buckets on the first try; a
    degraded retry scores near the first try (kept in `pending`)."""
    first = pending.get("confidence")
    if degraded and first is not None:
        a, sd = L1_LIFT
        return min(1.0, max(0.0, first + rng.gauss(a, sd)))
    weights, _ = CONFIDENCE[TASKS[task_type][1]]
    k = rng.choices(range(4), weights)[0]
    confidence = rng.uniform(BUCKETS[k], BUCKETS[k + 1])
    pending["confidence"] = confidence
    return confidence


def pass_rate(task_type: str, confidence: float) -> float:
    """The chance that a device answer at this confidence is acceptable (the simulated ground truth)."""
    shape = TASKS[task_type][1]
    over = OVERCONFIDENT.get(shape)
    if over and confidence >= over[0]:
        return over[1]
    shift = SHIFT.get(task_type, 0.0)
    knots = [(0.0, CONFIDENCE[shape][1][0][1])] + [(c + shift, p) for c, p in CONFIDENCE[shape][1][1:]]
    for (c0, p0), (c1, p1) in zip(knots, knots[1:]):
        if confidence <= c1:
            return p0 + (p1 - p0) * (confidence - c0) / (c1 - c0)
    return knots[-1][1]


def acceptable(rng: random.Random, task_type: str, confidence: float) -> bool:
    """Ground truth a reviewer would report: acceptable with the task type's pass rate at that confidence."""
    return rng.random() < pass_rate(task_type, confidence)
