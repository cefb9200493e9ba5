"""`routerscope review next|verdict|status`: the human review queue (docs/review.md#the-review-queue).

The labeling design (docs/metrics.md §3d) queues a uniform share of the events the replay's judge labels for a
person. `next` shows the oldest waiting one — the request, the device's answer, the cloud's reference, the
judge's verdict and its reason; `verdict REQUEST_ID acceptable|unacceptable --reviewer NAME` records the person's
verdict and publishes it as a `human_review` label (the judge never overwrites it; §3d audits the judge with it).
The weekly report (`routerscope report`) is another command."""

from __future__ import annotations

import json
import sys
from datetime import datetime

from routerscope.core.errors import RouterscopeError
from routerscope.core.settings import Settings
from routerscope.core.timeutil import UTC

VERDICTS = {"acceptable": True, "unacceptable": False}


def _queue(settings: Settings):
    from routerscope.router.review_queue import ReviewQueue  # deferred: start-up

    return ReviewQueue(settings.request_texts_path)


def _shown(item) -> dict:
    return {
        "request_id": item.request_id,
        "task_type": item.task_type,
        "fallback_type": item.fallback_type,
        "request": item.request_text,
        "device_answer": item.device_answer,
        "reference": item.reference,
        "judge": {"acceptable": item.judge_acceptable, "reason": item.judge_reason, "labeler": item.labeler},
        "queued_at": item.queued_at,
        "reviewed": None
        if item.reviewed_at is None
        else {"at": item.reviewed_at, "by": item.reviewer, "acceptable": item.acceptable},
    }


def _verdict_word(value: bool | None) -> str:
    return "no verdict" if value is None else "acceptable" if value else "not acceptable"


def cmd_next(args, settings: Settings) -> int:
    with _queue(settings) as queue:
        item = queue.next(args.task_type or "")
        counts = queue.counts()
    if item is None:
        print(json.dumps({"item": None, **counts}) if args.json else f"nothing to review ({counts['reviewed']} done)")
        return 0
    if args.json:
        print(json.dumps({"item": _shown(item), **counts}, indent=2, ensure_ascii=False))
        return 0
    ref = item.reference if item.reference is not None else "(none: the cloud gave no answer)"
    print(
        f"{item.request_id}  ({item.task_type}, {item.fallback_type} fallback; queued {item.queued_at}; "
        f"{counts['waiting']} waiting)\n"
        f"request:         {item.request_text}\n"
        f"device answer:   {item.device_answer}\n"
        f"cloud reference: {ref}\n"
        f"judge:           {_verdict_word(item.judge_acceptable)}"
        + (f" ({item.judge_reason})" if item.judge_reason else "")
        + f"\nrecord yours:    routerscope review verdict {item.request_id} acceptable|unacceptable --reviewer NAME"
    )
    return 0


def cmd_verdict(args, settings: Settings) -> int:
    from routerscope.core import names  # deferred: start-up
    from routerscope.core.kafka import producer_config  # deferred: start-up: kafka-python
    from routerscope.instrumentation.emitter import KafkaEmitter  # deferred: start-up: the emitter and kafka-python
    from routerscope.instrumentation.telemetry import Telemetry  # deferred: start-up: OpenTelemetry

    if not args.reviewer.strip():
        raise RouterscopeError("a reviewer is named: pass --reviewer NAME")
    from routerscope.router.review_queue import AlreadyReviewed  # deferred: start-up

    emitter = KafkaEmitter(producer_config(settings), settings.spool_path, block_when_full=True)  # fails first
    try:
        queue_ = _queue(settings)
    except RouterscopeError:
        emitter.close(0)
        raise
    with queue_ as queue:
        try:
            _, label = queue.record(args.request_id, VERDICTS[args.verdict], args.reviewer, datetime.now(UTC))
        except AlreadyReviewed as exc:
            emitter.close(0)
            done = exc.item
            raise RouterscopeError(
                f"{args.request_id!r} already has a verdict ({_verdict_word(done.acceptable)}, by {done.reviewer} "
                f"at {done.reviewed_at}); only {done.reviewer} may change it; `routerscope review next` shows the "
                "next one"
            ) from None
        except KeyError:
            emitter.close(0)
            raise RouterscopeError(
                f"{args.request_id!r} is not in the review queue; `routerscope review next` shows the next one"
            ) from None
        except ValueError as exc:
            emitter.close(0)
            raise RouterscopeError(f"{exc}: pass --reviewer NAME") from None
    try:
        Telemetry(emitter).send(names.TOPIC_LABELS, label.request_id, label)
    finally:
        emitter.close(30)
    counters = emitter.counters()
    where = "published" if counters["delivered"] else "spooled (sent with the next run that reaches the broker)"
    print(f"recorded: {args.request_id} {args.verdict} by {args.reviewer.strip()}; human_review label {where}")
    return 0


def cmd_status(args, settings: Settings) -> int:
    with _queue(settings) as queue:
        counts = queue.counts()
    print(json.dumps(counts) if args.json else f"{counts['waiting']} waiting, {counts['reviewed']} reviewed")
    return 0


def add_commands(sub) -> None:
    """`review` on the `routerscope` parser's subparsers."""
    p = sub.add_parser("review", help="the human review queue: the next request to judge, and your verdict on it")
    rsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    r = rsub.add_parser("next", help="the oldest request waiting for a person's verdict, with both answers")
    r.add_argument("--task-type", help="only this task type")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_next)
    r = rsub.add_parser("verdict", help="record a person's verdict on a queued request (a human_review label)")
    r.add_argument("request_id")
    r.add_argument("verdict", choices=sorted(VERDICTS))
    r.add_argument("--reviewer", required=True, help="who judged (kept in the label's labeler)")
    r.set_defaults(func=cmd_verdict)
    r = rsub.add_parser("status", help="how many requests wait, how many are reviewed")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_status)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run `routerscope review`")
