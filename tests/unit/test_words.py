"""Issue 39 §8: an incident's condition and values in words, never the rule's expression or machine numbers."""

from __future__ import annotations

import pytest

from routerscope.dashboards import words


@pytest.mark.parametrize(
    "trip, expected",
    [
        (
            {
                "metric": "fallback_rate",
                "op": ">",
                "limit": 0.5,
                "default_limit": 0.3,
                "windows": [{"value": 0.864, "n": 184}],
            },
            "fallback rate above 50% (this task type's limit; the default is 30%): 86.4% (n = 184)",
        ),
        (  # was `l2_l3_drift.drifting == True: True (n = 828) · True (n = 759)`
            {
                "metric": "l2_l3_drift.drifting",
                "op": "==",
                "limit": True,
                "windows": [{"value": True, "n": 828}, {"value": True, "n": 759}],
            },
            "L2+L3 share drifting: n = 828 · n = 759",
        ),
        (  # was `pipeline.freshness_lag_s > 600: 1.1e+03`
            {"metric": "pipeline.freshness_lag_s", "op": ">", "limit": 600, "windows": [{"value": 1100.3}]},
            "newest event's age above 10 min: 18 min",
        ),
        (  # was `cloud above 0: 1 · 1`
            {"metric": "pipeline.breaker_open.cloud", "op": ">", "limit": 0, "windows": [{"value": 1}, {"value": 2}]},
            "open cloud breakers above 0: 1 · 2",
        ),
        ({}, ""),
    ],
)
def test_an_incidents_condition_reads_as_words(trip, expected):
    assert words.tripped(trip) == expected


@pytest.mark.parametrize(
    "metric, value, expected",
    [
        ("cost_usd", 3397.6956, "3,400"),
        ("requests", 20005, "20,005"),
        ("l2_l3_share", 0.4551, "45.5%"),
        ("x", None, "—"),
    ],
)
def test_numbers_to_their_precision(metric, value, expected):
    assert words.value(metric, value) == expected


def test_the_analytics_text_on_a_page_names_no_key_and_no_section_sign():
    """Issue 55 §8: the what-if's warning read `the labeled false_fallback_rate 0.489 lies outside the population
    estimate's interval [0.379, 0.411] (§3c)` on Weekly tuning, and its rows `false fallbacks, estimate (§3c)`."""
    from routerscope.dashboards.words import prose

    said = prose(
        "the labels are not spread evenly: the labeled false_fallback_rate 0.489 lies outside the population "
        "estimate's interval [0.379, 0.411] (§3c); read the estimate"
    )
    assert said == (
        "the labels are not spread evenly: the labeled false-fallback rate 0.489 lies outside the population "
        "estimate's interval [0.379, 0.411] (post-stratified); read the estimate"
    )
    assert prose("missed fallbacks, corrected (§3d)") == "missed fallbacks, corrected (by people's verdicts)"
    assert prose("as §14 says; fallback_rate_high stays") == (
        "as docs/metrics.md section 14 says; fallback_rate_high stays"  # a rule id is not a metric key
    )
