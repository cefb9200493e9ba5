"""The statistics of docs/metrics.md against values computed by hand."""

from __future__ import annotations

import math

import pytest

from routerscope.warehouse.analytics import stats


def test_wilson_interval_by_hand():
    # p = 3/10, z = 1.959964, z² = 3.841459
    # centre = (0.3 + 3.841459/20) / (1 + 3.841459/10) = 0.492073 / 1.384146 = 0.355507
    # half   = (1.959964 / 1.384146) * sqrt(0.3·0.7/10 + 3.841459/400) = 1.416010 · 0.174940 = 0.247715
    low, high = stats.wilson(3, 10)
    assert low == pytest.approx(0.355507 - 0.247715, abs=1e-6)
    assert high == pytest.approx(0.355507 + 0.247715, abs=1e-6)


def test_wilson_interval_at_the_edges_and_empty():
    # p = 1, n = 2: centre = (1 + 0.960365)/2.920730 = 0.671190, half = 0.671055·sqrt(3.841459/16) = 0.328810
    low, high = stats.wilson(2, 2)
    assert low == pytest.approx(0.342380, abs=1e-6) and high == 1.0
    assert stats.wilson(0, 5)[0] == pytest.approx(0.0, abs=1e-12)
    assert stats.wilson(0, 0) is None


def test_two_proportion_z_by_hand():
    # current 5/6, baseline 1/4; pooled 6/10 = 0.6; se = sqrt(0.6·0.4·(1/6 + 1/4)) = sqrt(0.1) = 0.316228
    # z = (0.833333 - 0.25) / 0.316228 = 1.844662
    assert stats.two_proportion_z(5, 6, 1, 4) == pytest.approx(1.844662, abs=1e-6)
    assert stats.two_proportion_z(1, 4, 5, 6) == pytest.approx(-1.844662, abs=1e-6)


@pytest.mark.parametrize("args", [(0, 0, 1, 4), (1, 4, 0, 0), (0, 5, 0, 7), (5, 5, 7, 7)])
def test_two_proportion_z_is_null_without_variance_or_data(args):
    assert stats.two_proportion_z(*args) is None


def test_psi_by_hand_with_the_floor():
    current = [1 / 6, 0, 4 / 6, 1 / 6, 0]
    baseline = [0.75, 0, 0.25, 0, 0]
    # zeros floored at 1e-4:
    # L0 (0.166667-0.75)·ln(0.166667/0.75)   = -0.583333·-1.504077 = 0.877378
    # L2 (0.666667-0.25)·ln(0.666667/0.25)   =  0.416667· 0.980829 = 0.408679
    # L3 (0.166667-0.0001)·ln(0.166667/1e-4) =  0.166567· 7.418581 = 1.235689
    # L1, L4: (1e-4 - 1e-4)·ln 1 = 0
    assert stats.psi(current, baseline) == pytest.approx(0.877378 + 0.408679 + 1.235689, abs=1e-5)
    assert stats.psi([0.2] * 5, [0.2] * 5) == 0.0


def test_quantile_is_linear_between_closest_ranks():
    assert stats.quantile([1, 2, 2], 0.5) == 2
    assert stats.quantile([1, 2, 3, 4], 0.95) == pytest.approx(3.85)  # position 0.95·3 = 2.85
    assert stats.quantile([], 0.5) is None


@pytest.mark.parametrize(
    "delta_pp, z, psi, expected",
    [
        (5.0, 3.0, 0.0, True),
        (5.0, 0.5, 0.1, True),
        (5.0, 2.9, 0.09, False),
        (-5.0, 9.0, 9.0, False),
        (None, None, None, False),
        (1.0, None, 0.2, True),
    ],
)
def test_drifting_needs_a_rise_and_a_significant_change(delta_pp, z, psi, expected):
    assert stats.drifting(delta_pp, z, psi) is expected


def test_ratio_is_null_for_an_empty_denominator():
    assert stats.ratio(0, 0) is None and stats.ratio(1, 4) == 0.25 and not math.isnan(stats.ratio(0, 3))


@pytest.mark.parametrize(
    "name, blocks, fitted",
    [
        ("already non-decreasing: unchanged", [(0.1, 2, 1), (0.5, 4, 3), (0.9, 1, 1)], [0.5, 0.75, 1.0]),
        # 1/1, then 0/1 below it → pooled 1/2; then 0/1 below 0.5 → pooled 1/3; 2/2 above: kept
        (
            "a violator pools back as far as it must",
            [(0.1, 1, 1), (0.2, 1, 0), (0.3, 1, 0), (0.4, 2, 2)],
            [1 / 3] * 3 + [1.0],
        ),
        # 3/3 then 1/3: pooled 4/6 = 0.667, still above the 2/6 to its left
        (
            "weighted mean, not the mean of rates",
            [(0.40, 4, 0), (0.55, 6, 2), (0.60, 3, 3), (0.65, 3, 1), (0.75, 20, 20)],
            [0.0, 1 / 3, 2 / 3, 2 / 3, 1.0],
        ),
        ("no blocks", [], []),
    ],
)
def test_pool_adjacent_violators_by_hand(name, blocks, fitted):
    """docs/metrics.md §6 local_pass_rate: while a block's value is below its left neighbour's, merge the two."""
    assert stats.isotonic_blocks(blocks) == pytest.approx(fitted), name


@pytest.mark.parametrize(
    "change, text",
    [
        (None, ""),
        (
            {"from": 0.7, "to": 0.5, "band": {"low": 0.5, "high": 0.7, "n": 55, "pass_rate": 0.33, "ci": [0.21, 0.46]}},
            "moving 0.70 → 0.50 serves 55 more labeled requests on the device; they passed 33 % [21 %, 46 %]",
        ),
        (
            {"from": 0.6, "to": 0.8, "band": {"low": 0.6, "high": 0.8, "n": 0, "pass_rate": None, "ci": None}},
            "moving 0.60 → 0.80 sends 0 labeled requests to the cloud instead (no labeled request lies between "
            "the two thresholds)",
        ),
    ],
)
def test_threshold_change_reads_as_one_sentence(change, text):
    """docs/metrics.md §6: the tuning page shows the band a recommendation moves next to it."""
    from routerscope.warehouse.analytics.metrics import threshold_change_text

    assert threshold_change_text(change) == text


def test_a_push_is_compared_with_the_version_that_served_the_traffic_before_it():
    """docs/metrics.md §9: the live sample's one request under its own version, first seen later than the real
    baseline's 4,050, is not the baseline of the push."""
    from routerscope.warehouse.analytics.metrics import comparable_span, push_baseline

    earlier = {
        "base": {"requests": 4050, "first_event": "2026-11-29T10:00:00Z"},
        "live-sample": {"requests": 1, "first_event": "2026-11-29T10:00:05Z"},
        "push": {"requests": 3, "first_event": "2026-11-29T11:30:00Z"},
    }
    assert push_baseline(earlier, "push") == "base"
    assert push_baseline({"push": earlier["push"]}, "push") is None
    tie = {
        "a": {"requests": 5, "first_event": "2026-11-29T10:00:00Z"},
        "b": {"requests": 5, "first_event": "2026-11-29T10:30:00Z"},
    }
    assert push_baseline(tie, "push") == "b"  # ties: the later version
    from datetime import UTC, datetime

    push = {"first_event": "2026-11-29T11:30:00Z", "last_event": "2026-11-29T13:30:00Z"}
    assert comparable_span(push) == (
        datetime(2026, 11, 29, 9, 30, tzinfo=UTC),
        datetime(2026, 11, 29, 11, 30, tzinfo=UTC),
    )
    short = {"first_event": "2026-11-29T11:30:00Z", "last_event": "2026-11-29T11:35:00Z"}
    assert comparable_span(short)[0] == datetime(2026, 11, 29, 10, 30, tzinfo=UTC)  # at least an hour
