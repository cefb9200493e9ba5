"""The simulated requests (SIMULATED): the task mix, what the users ask, and the ground truth the simulated
reviewers and the simulated replay report about answers (shadow agreement, acceptability, determinism)."""

from __future__ import annotations

import functools
import math
import random

from router.policy import default_policy

TASKS = {  # task type: (share of traffic, confidence Beta(a, b), expected output tokens)
    "intent_classify": (0.30, (14, 2), 4),
    "short_reply": (0.25, (12, 2.5), 40),
    "short_summary": (0.15, (12, 2), 120),
    "slot_extract": (0.10, (14, 2), 30),
    "long_summary": (0.10, (2, 2), 400),
    "multi_step_tools": (0.05, (2, 2), 200),
    "tool_call": (0.05, (16, 2), 60),
    "code_snippet": (0.05, (10, 3), 40),  # in shadow mode: the cloud answers, the device is compared
}
SHADOW_TASKS = ("code_snippet",)
INPUT_TOKENS = {"long_summary": (9000, 9000), "code_snippet": (20, 1000)}  # others: 20-480
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


@functools.cache
def true_thresholds() -> dict[str, float]:
    """The confidence above which the device's answers are mostly acceptable: the default policy's thresholds."""
    return {task: cap.threshold for task, cap in default_policy().capabilities.items() if cap.supported}


def acceptable(rng: random.Random, task_type: str, confidence: float) -> bool:
    """Ground truth: acceptability rises steeply with confidence around (just below) the task type's
    default threshold, so the default policy is well tuned; except that short_summary's top bucket
    is over-confident (the calibration view flags it)."""
    p = 1 / (1 + math.exp(-40 * (confidence - (true_thresholds().get(task_type, 0.7) - 0.02))))
    if task_type == "short_summary" and confidence >= 0.85:
        p = 0.72
    return rng.random() < p
