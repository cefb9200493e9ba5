"""`routerscope loop status|explain|approve|rollback|resume`: the closed loop's candidates as a person sees and
steers them (docs/loop.md#commands). The work is in `routerscope.warehouse.analytics.loop`, imported when a
command runs: `routerscope --help` imports this module for its parser (`add_commands`)."""

from __future__ import annotations

import getpass
import json
from datetime import datetime, timedelta, timezone

from routerscope.core.errors import RouterscopeError
from routerscope.core.settings import Settings


def _root(settings: Settings):
    from routerscope.warehouse.analytics.loop.evidence import policies_root  # deferred: start-up

    return policies_root(settings.home)


def _find(settings: Settings, pid: str):
    from routerscope.warehouse.analytics.loop.evidence import candidates, find  # deferred: start-up

    found = find(_root(settings), pid)
    if found is None:
        n = sum(c.policy_id.startswith(pid) for c in candidates(_root(settings)))
        why = f"{n} candidates start with it; give more of the id" if n > 1 else "no candidate has it"
        raise RouterscopeError(f"policy id {pid!r}: {why} (`routerscope loop status` lists them)")
    return found


def _fmt(interval: dict | None) -> str:
    if not interval or interval.get("estimate") is None:
        return "unknown (no data)"
    ci = interval.get("ci") or [None, None]
    return f"{interval['estimate'] * 100:+.2f} pts [{ci[0] * 100:+.2f}, {ci[1] * 100:+.2f}], n={interval['n']} sessions"


def summary(candidate) -> dict:
    looks = candidate.look_files()
    last = json.loads(looks[-1].read_text()) if looks else None
    pending = sum(not p.with_suffix(".sent").exists() for p in candidate.transition_files())
    return {
        "task_type": candidate.task_type,
        "policy_id": candidate.policy_id,
        "state": candidate.state(),
        "threshold": candidate.candidate().get("threshold"),
        "looks": len(looks),
        "last_verdict": last["verdict"] if last else None,
        "missed_fallback_delta": last["measured"]["missed_fallback_delta"] if last else None,
        "offload": last["measured"]["offload"] if last else None,
        "offload_prediction": last["measured"]["offload_prediction"] if last else None,
        "unpublished_transitions": pending,
    }


UNREADABLE = (ValueError, KeyError, TypeError, IndexError, OSError)  # a hand-edited or damaged file (JSON, YAML)


def _readable(c) -> dict:
    """`summary`, or a row naming what could not be read (one damaged candidate never hides the others)."""
    try:
        return summary(c)
    except UNREADABLE as exc:
        return {
            "task_type": c.task_type,
            "policy_id": c.policy_id,
            "state": "unreadable",
            "error": f"{exc}"[:300],
            "threshold": None,
            "last_verdict": None,
            "missed_fallback_delta": None,
            "unpublished_transitions": 0,
        }


def cmd_status(args, settings: Settings) -> int:
    from routerscope.warehouse.analytics.loop.evidence import candidates  # deferred: start-up

    rows = [_readable(c) for c in candidates(_root(settings), args.task_type)]
    if args.json:
        print(json.dumps({"candidates": rows}, indent=2, sort_keys=True))
        return 0
    if not rows:
        print("no candidates yet (the loop writes them under ROUTERSCOPE_HOME/policies; docs/loop.md)")
        return 0
    for r in rows:
        if r["state"] == "unreadable":
            print(f"{r['task_type']:<18} {r['policy_id']}  unreadable: {r['error']} (`routerscope loop explain`)")
            continue
        verdict = r["last_verdict"]
        said = f"{verdict['action']} ({verdict['reason']})" if verdict else "no look yet"
        print(
            f"{r['task_type']:<18} {r['policy_id']}  {r['state']:<12} threshold {r['threshold']}  "
            f"last look: {said}; Δ missed fallbacks {_fmt(r['missed_fallback_delta'])}"
            + (
                f"; {r['unpublished_transitions']} transition(s) not yet published"
                if r["unpublished_transitions"]
                else ""
            )
        )
    return 0


def cmd_explain(args, settings: Settings) -> int:
    c = _find(settings, args.id)
    try:
        return _explain(args, c)
    except UNREADABLE as exc:
        raise RouterscopeError(
            f"{c.policy_id}: a file of its directory {c.dir} cannot be read ({str(exc)[:200]}); restore it from a "
            "backup, or roll the candidate back"
        ) from None


def _explain(args, c) -> int:
    out = {
        **summary(c),
        "candidate": c.candidate(),
        "header": c.header(),
        "transitions": [t["event"] for t in c.transitions()],
        "looks": [
            {"verdict": look["verdict"], "clock": look["clock"], "measured": look["measured"]} for look in c.looks()
        ],
        "chain_problems": c.verify(),
    }
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True, default=str))
        return 0
    print(f"{c.task_type} {c.policy_id}: {out['state']} (candidate {json.dumps(out['candidate'], sort_keys=True)})")
    print(f"  parent policy {out['header']['parent']}, window {out['header']['window']}")
    for e in out["transitions"]:
        print(
            f"  #{e['seq']} {e['event_time']} {e['from_state'] or '—'} → {e['to_state']} "
            f"({e['reason']}, by {e['actor']}) on {e['evidence_file']} sha256 {e['evidence_hash'][:12]}…"
        )
    for i, look in enumerate(out["looks"], 1):
        if look["verdict"]["action"] != "continue" or i == len(out["looks"]):
            m = look["measured"]
            print(
                f"  look {i}: {look['verdict']['action']} ({look['verdict']['reason']}); Δ missed fallbacks "
                f"{_fmt(m['missed_fallback_delta'])}; sample-ratio p {m['srm_p']}"
            )
    print("  chain: whole" if not out["chain_problems"] else "  chain broken: " + "; ".join(out["chain_problems"]))
    return 0


def _change(args, settings: Settings, to_state_of, reason: str) -> int:
    from routerscope.core.kafka import check_reachable  # deferred: librdkafka
    from routerscope.warehouse.analytics.loop.lifecycle import TransitionRefused  # deferred: start-up
    from routerscope.warehouse.analytics.loop.notify import Notifying  # deferred: start-up
    from routerscope.warehouse.analytics.loop.publish import KafkaPublisher  # deferred: kafka-python

    c = _find(settings, args.id)
    check_reachable(settings)  # before anything is written: without a broker the command changes nothing
    kafka = KafkaPublisher(settings)
    publish = Notifying(kafka, settings, c.dir)
    try:
        c.publish_pending(publish)
        state = c.state()
        target = to_state_of(c, state)
        looks = c.look_files()
        evidence = (
            f"looks/{looks[-1].name}"
            if looks
            else ("evaluation.json" if (c.dir / "evaluation.json").exists() else "candidate.yaml")
        )
        try:
            c.transition(state, target, reason, evidence, publish, actor=args.actor)
        except TransitionRefused as exc:
            raise RouterscopeError(f"{c.policy_id}: {exc}") from None
    finally:
        kafka.close()
    print(f"{c.task_type} {c.policy_id}: {state} → {target} ({reason}, by {args.actor})")
    return 0


def cmd_approve(args, settings: Settings) -> int:
    def target(c, state):
        looks = c.looks()
        if state != "canary_25" or not looks or looks[-1]["verdict"]["action"] != "await_approval":
            last = looks[-1]["verdict"]["action"] if looks else "none"
            raise RouterscopeError(
                f"{c.policy_id} is {state} and its last look said {last}: only a canary_25 whose last look says "
                "await_approval can be approved (`routerscope loop explain` shows why)"
            )
        return "full"

    return _change(args, settings, target, "approved")


def cmd_rollback(args, settings: Settings) -> int:
    return _change(args, settings, lambda c, state: "rolled_back", args.reason)


def cmd_resume(args, settings: Settings) -> int:
    def target(c, state):
        if state not in ("halted", "held"):
            raise RouterscopeError(f"{c.policy_id} is {state}: only a halted or held candidate resumes")
        return c.transitions()[-1]["event"]["from_state"]

    return _change(args, settings, target, "resumed")


def cmd_step(args, settings: Settings) -> int:
    """One look at every candidate in a canary stage, from the warehouse (docs/loop.md#a-look)."""
    from routerscope.core.timeutil import parse_utc  # deferred: start-up
    from routerscope.warehouse.analytics.loop.runner import step_all  # deferred: chDB, kafka-python

    now = parse_utc(args.now) if args.now else datetime.now(timezone.utc)  # noqa: UP017 (as the rest of the CLI)
    results = step_all(settings, now=now, task_type=args.task_type)
    if args.json:
        print(json.dumps({"looks": results}, indent=2, sort_keys=True))
    elif not results:
        print("no candidate in a canary stage")
    for r in [] if args.json else results:
        moved = f" → {r['to']}" if r["to"] else ""
        print(
            f"{r['task_type']} {r['policy_id']}: {r['from']}{moved}: "
            f"{r['verdict']['action']} ({r['verdict']['reason']})"
        )
    return 0


def cmd_propose(args, settings: Settings) -> int:
    """The weekly step of one task type: a candidate, its evaluation, evaluated or rejected (docs/loop.md#propose)."""
    from routerscope.core.timeutil import parse_utc  # deferred: start-up
    from routerscope.router.policy import PolicyStore  # deferred: the policy file
    from routerscope.warehouse.analytics.alerting.rules import load_rules  # deferred: start-up
    from routerscope.warehouse.analytics.loop.runner import propose_candidate  # deferred: chDB, kafka-python
    from routerscope.warehouse.sql import QueryWindow  # deferred: start-up

    end = parse_utc(args.end) if args.end else datetime.now(timezone.utc)  # noqa: UP017 (as the rest of the CLI)
    policy = PolicyStore().current()
    cap = policy.capabilities.get(args.task_type)
    if cap is None or cap.threshold is None:
        raise RouterscopeError(
            f"task type {args.task_type!r} has no confidence threshold in the policy {policy.version}; "
            "the loop tunes thresholds only (docs/loop.md#propose)"
        )
    _version, rules = load_rules(settings.alert_rules)
    out = propose_candidate(
        settings,
        task_type=args.task_type,
        window=QueryWindow(end - timedelta(days=args.days), end),
        today=float(cap.threshold),
        policy_version=policy.version,
        target=args.target,
        alert_rules=rules,
        start_canary=args.start_canary,
        actor=args.actor,
    )
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        said = "already proposed" if not out["new"] else f"threshold {out.get('threshold')} (today {cap.threshold})"
        print(f"{args.task_type} {out['policy_id']}: {out['state']}, {said}")
    return 0


def add_commands(sub, port_type=None) -> None:
    """The `loop` command and its actions, on the `routerscope` parser's subparsers."""
    p = sub.add_parser(
        "loop", help="the closed loop's candidate policies: status, why, approve, roll back (docs/loop.md)"
    )
    lsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    s = lsub.add_parser("status", help="every candidate, its state and its last look")
    s.add_argument("--json", action="store_true")
    s.add_argument("--task-type", help="one task type's candidates")
    s.set_defaults(func=cmd_status)
    e = lsub.add_parser("explain", help="one candidate's transitions and looks with their evidence")
    e.add_argument("id", help="a policy id, or a prefix only it has")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_explain)
    pr = lsub.add_parser("propose", help="the week's candidate threshold of one task type, evaluated offline")
    pr.add_argument("--task-type", required=True)
    pr.add_argument("--target", type=float, default=0.10, help="the missed-fallback rate to meet (default 0.10)")
    pr.add_argument("--days", type=float, default=7.0, help="the window: this many days before --end (default 7)")
    pr.add_argument("--end", help="the window's end (ISO 8601, UTC when no zone; default: now)")
    pr.add_argument("--start-canary", action="store_true", help="an evaluated candidate goes on to canary_5")
    pr.add_argument("--actor", default="auto", help="who proposes (default: auto)")
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(func=cmd_propose)
    st = lsub.add_parser("step", help="one look at every candidate in a canary stage, from the warehouse")
    st.add_argument("--now", help="judge as of this time (ISO 8601, UTC when no zone; default: now)")
    st.add_argument("--task-type", help="one task type's candidates")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_step)
    for name, func, helptext in (
        ("approve", cmd_approve, "canary_25 → full, when its last look awaits approval"),
        ("rollback", cmd_rollback, "any live state → rolled_back"),
        ("resume", cmd_resume, "halted or held → the stage it stopped in"),
    ):
        a = lsub.add_parser(name, help=helptext)
        a.add_argument("id", help="a policy id, or a prefix only it has")
        a.add_argument("--actor", default=getpass.getuser(), help="who decides (default: the login name)")
        if name == "rollback":
            a.add_argument("--reason", default="manual", help="why (default: manual)")
        a.set_defaults(func=func)
