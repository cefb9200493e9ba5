"""The weekly review at a glance (routerscope/dashboards/summary.py): one row per task type, what needs action first,
the verdicts reconciled in words. Inputs are hand-built in the shapes of the metric set and the reports."""

from routerscope.dashboards.summary import reconcile, rows


def report(**task_types) -> dict:
    return {"task_types": task_types}


METRICS = {
    "by_task_type": {
        "intent_classify": {
            "false_fallback_by_type": {"quality": {"rate": 0.25, "labeled": 40, "ci": [0.14, 0.4]}},
            "false_fallback_rate": 0.5,  # (all types: not the one shown)
            "false_fallback_labeled": 60,
        },
        "short_reply": {"false_fallback_rate": 0.9, "false_fallback_labeled": 10, "false_fallback_ci": [0.6, 0.98]},
        "tool_call": {},
        "slot_extract": {},
    },
    "calibration": {
        "intent_classify": {
            "current_threshold": 0.70,
            "recommended_threshold": 0.80,
            "threshold_change": {"from": 0.7, "to": 0.8, "band": {"low": 0.7, "high": 0.8, "n": 55, "pass_rate": 0.33}},
        },
        "short_reply": {"current_threshold": 0.60, "recommended_threshold": 0.60},
        "tool_call": {"current_threshold": 0.80, "recommended_threshold": None},
    },
}
REVIEW = {
    "grading": report(
        intent_classify={"tier": "offload", "reason": "score >= 0.75"},
        short_reply={"tier": "offload"},
        tool_call={"tier": "keep-cloud", "reason": "error_cost_veto"},
        slot_extract={"tier": "offload"},
    ),
    "readiness": report(
        intent_classify={"verdict": "ready"},
        short_reply={"verdict": "ready"},
        tool_call={"verdict": "ready"},
        slot_extract={"verdict": "ready"},
    ),
    "rollout": report(
        intent_classify={"stage": "full", "recommendation": "hold"},
        short_reply={
            "stage": "full",
            "recommendation": "rollback",
            "rollback": {"recommended": True, "words": "rollback recommended for short_reply (route_accuracy) …"},
        },
        tool_call={"stage": "full", "recommendation": "hold"},
        slot_extract={"stage": "canary", "recommendation": "advance"},
    ),
}


def test_rows_are_sorted_by_what_needs_action_first():
    out = rows(METRICS, REVIEW)
    assert [(r["task type"], r["needs"]) for r in out] == [
        (
            "short_reply",
            "rollback recommended",
        ),  # the range's rollback state (routerscope.warehouse.analytics.rollback)
        ("intent_classify", "threshold to move"),
        ("tool_call", "verdicts disagree"),
        ("slot_extract", "stage ready to advance"),
    ]
    short_reply, intent, tool_call, slot_extract = out
    # one truth: the row's recommendation and its rollback words come from the same state
    assert (short_reply["recommendation"], short_reply["rollback"]) == (
        "rollback",
        "rollback recommended for short_reply (route_accuracy) …",
    )
    assert slot_extract["rollback"] == "no rollback recommended"
    # no by-type figure: the combined false-fallback rate with its interval stands in
    assert short_reply["false fallbacks (quality)"] == "90.0% [60.0%, 98.0%] of 10 (all types)"
    assert short_reply["recommended threshold"] == "keep 0.60"
    # the quality fallbacks alone (docs/metrics.md §3 by type), and the band the recommended move crosses
    assert intent["false fallbacks (quality)"] == "25.0% [14.0%, 40.0%] of 40"
    assert intent["recommended threshold"] == "0.70 → 0.80 (band [0.70, 0.80): n = 55, pass 33.0%)"
    assert tool_call["recommended threshold"].startswith("none qualifies")


def test_reconcile_says_where_the_three_verdicts_disagree():
    # grading vetoes it (error cost) while users are served from the device
    text = reconcile({"tier": "keep-cloud", "reason": "error_cost_veto"}, {"verdict": "ready"}, {"stage": "full"})
    assert "grading keeps it in the cloud (vetoed by its error cost) while it serves users from the device" in text
    assert "readiness passes but grading keeps it in the cloud" in text
    # a failing readiness gate at a stage that serves users
    gates = {"gate_memory": {"status": "pass"}, "gate_quality": {"status": "fail"}}
    assert reconcile({"tier": "offload"}, {"verdict": "not_ready", "gates": gates}, {"stage": "canary"}) == (
        "readiness fails the quality gate while at stage canary: fix the gate or step back"
    )
    two = {**gates, "gate_duration": {"status": "fail"}}  # words, never the gates' keys (`gate_quality`)
    assert reconcile({"tier": "offload"}, {"verdict": "not_ready", "gates": two}, {"stage": "full"}).startswith(
        "readiness fails the quality and duration gates while at stage full"
    )
    three = {**two, "gate_memory": {"status": "fail"}}
    assert "fails the memory, quality and duration gates" in reconcile(
        {"tier": "offload"}, {"verdict": "not_ready", "gates": three}, {"stage": "full"}
    )
    # grading would try it, readiness stops it before any stage serves users
    assert "readiness stops it at the door" in reconcile(
        {"tier": "shadow"}, {"verdict": "not_ready", "gates": gates}, {"stage": "shadow"}
    )
    # agreement: nothing to say
    assert reconcile({"tier": "offload"}, {"verdict": "ready"}, {"stage": "full"}) == ""
    assert reconcile(None, None, None) == ""


def test_false_fallbacks_show_the_estimate_with_the_labeled_share_beside_it_and_warn_below_080_coverage():
    """docs/metrics.md §3c on the glance row: the estimate and its interval first, the labeled share beside it."""
    group = {
        "false_fallback_by_type": {
            "quality": {"rate": 0.25, "labeled": 40, "ci": [0.14, 0.4]},
            "quality_est": {"rate": 0.125, "ci": [0.05, 0.28], "n_eff": 30.0, "coverage": 0.9},
        }
    }
    assert rows({"by_task_type": {"t": group}}, {})[0]["false fallbacks (quality)"] == (
        "est. 12.5% [5.0%, 28.0%] · labeled 25.0% of 40"
    )
    group["false_fallback_by_type"]["quality_est"]["coverage"] = 0.625
    assert rows({"by_task_type": {"t": group}}, {})[0]["false fallbacks (quality)"] == (
        "est. 12.5% [5.0%, 28.0%] ⚠ coverage 62.5% · labeled 25.0% of 40"
    )


def test_the_recommended_threshold_is_the_one_on_the_estimate_where_the_metric_set_has_it():
    """docs/metrics.md §6 beside §3c: §6's labeled rule recommends nothing (0.914 labeled), the estimate 0.60;
    the row says the estimate's move and the band it crosses."""
    calibration = {
        "current_threshold": 0.70,
        "recommended_threshold": None,
        "recommended_threshold_est": 0.60,
        "threshold_change_est": {"from": 0.7, "to": 0.6, "band": {"low": 0.6, "high": 0.7, "n": 60, "pass_rate": 0.9}},
    }
    row = rows({"by_task_type": {"t": {}}, "calibration": {"t": calibration}}, {})[0]
    assert (row["needs"], row["recommended threshold"]) == (
        "threshold to move",
        "0.70 → 0.60 (band [0.60, 0.70): n = 60, pass 90.0%)",
    )
