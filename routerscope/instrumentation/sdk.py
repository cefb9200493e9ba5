"""Record routing decisions from any router: the same span, attempt spans and decision event as ours.

An application that makes its own device/cloud decisions records each one::

    recorder = Recorder.from_env()                     # the command line's environment: broker, home, spool
    with recorder.decision(task_type="short_reply", session_id=session, deadline_ms=2000, elapsed_ms=120) as d:
        d.device_attempt(level=0, outcome="low_confidence", latency_ms=180, confidence=0.41, threshold=0.7)
        d.cloud_attempt(level=2, outcome="ok", latency_ms=420, model="gpt-4o-mini", output_tokens=12)
        d.served(fallback_type="quality", reason="low_confidence")
    recorder.label(d.request_id, device_acceptable=True)    # later, when a reviewer judged it

The block is the decision span `route {task_type}` (current while the block runs, so the app's own
model-call spans nest under it); on exit it gets the `router.*` attributes, one child span per attempt
with GenAI attributes (made by the emitter's sender thread when there is one, see `Telemetry.decided`),
and the decision event leaves through the same emitter as our router's (bounded queue, disk spool,
accounting) with the span's trace ids. Session ids, request ids the application chose and labelers are
pseudonymised (their keyed hash, whatever they hold), and free text that looks personal is scrubbed
(`routerscope.instrumentation.pii`), before they reach a span, an event or a label.

An impossible record is refused where it is made, with `InvalidDecision` naming the rule, instead of
producing an event the loader would quarantine: attempt levels that decrease, level 1 twice, a cloud
attempt for a request with personal data (unless the decision says `pii_to_cloud=True`), a device
attempt after a capability miss, and, at `served()`, every field rule and cross-field invariant of the
contract (`routerscope.contract.validation`). If the block raises, nothing is emitted.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Literal, TypeGuard

import msgspec
from opentelemetry import context as otel_context
from opentelemetry.attributes import BoundedAttributes as _BoundedAttributes
from opentelemetry.context import Context, Token
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context

from routerscope.contract.events import (
    FALLBACK_TYPES,
    OUTCOMES,
    REASONS,
    Attempt,
    DecisionEvent,
    DeviceStats,
    LabelEvent,
    LabelSource,
    Outcome,
    new_decision,
)
from routerscope.contract.validation import DECISION_INVARIANTS, DECISIONS, LABELS
from routerscope.core import names
from routerscope.core.kafka import producer_config
from routerscope.core.settings import Settings
from routerscope.core.timeutil import utc
from routerscope.instrumentation import attributes as A
from routerscope.instrumentation import pii
from routerscope.instrumentation.emitter import KafkaEmitter
from routerscope.instrumentation.pii import UUID, scrub, scrub_event
from routerscope.instrumentation.spans import _attempts_end, _AttemptSpan, attempt_spans
from routerscope.instrumentation.telemetry import Telemetry

UTC = timezone.utc  # datetime.UTC is Python 3.11+; the SDK runs on 3.10

DEFAULT_POLICY_VERSION = "app"
_INVARIANT_DOCS = {inv.rule: inv.doc for inv in DECISION_INVARIANTS}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class InvalidDecision(ValueError):
    """A decision record that the contract forbids; the message names the broken rule(s)."""


def _device_stats(fields: dict | None) -> DeviceStats | None:
    """The device ledger from `served(device_stats=...)`; an unknown field is refused at the call."""
    if fields is None:
        return None
    try:
        return DeviceStats(**fields)
    except TypeError as exc:
        raise InvalidDecision(f"device_stats: {exc}") from None


# the decision span's attribute names, bound once (read for every decision)
_TASK_TYPE, _FALLBACK_TYPE, _REASON = A.ROUTER_TASK_TYPE, A.ROUTER_FALLBACK_TYPE, A.ROUTER_REASON
_DEGRADE_LEVEL, _CLOUD_CALLS, _POLICY_VERSION = A.ROUTER_DEGRADE_LEVEL, A.ROUTER_CLOUD_CALLS, A.ROUTER_POLICY_VERSION
_ENTERED_DEVICE, _MODE = A.ROUTER_ENTERED_DEVICE, A.ROUTER_MODE
_CONFIDENCE, _THRESHOLD = A.ROUTER_CONFIDENCE, A.ROUTER_THRESHOLD
_CONVERSATION = A.GEN_AI_CONVERSATION_ID
_CLEAN_IDS_MAX = 4096


# Free-text fields of a decision scrubbed besides its ids (routerscope.instrumentation.pii.FREE_TEXT), in the
# order `Recorder._finish` reads them.
_TEXT_FIELDS = ("task_type", "app_id", "device_tier", "app_version", "policy_version", "device_model", "cloud_model")
assert set(pii.FREE_TEXT["DecisionEvent"]) == {"request_id", "session_id", *_TEXT_FIELDS}
assert set(_TEXT_FIELDS) > pii.NAME_FIELDS


def _set_attributes(span, attributes: dict) -> None:
    """`span.set_attributes(attributes)` for the decision span's own attributes, whose keys are constants and
    whose values are already str, int, float or bool: the OpenTelemetry SDK's span takes them straight into
    its attribute map (what its validation would store, without re-checking each value, a third of the
    span's cost), unless a limit applies (a value length or a count limit it would have to enforce), the
    span is not the SDK's own, or it has ended; then through `set_attributes` as before."""
    attrs = getattr(span, "_attributes", None)
    store = getattr(attrs, "_dict", None)
    lock = getattr(span, "_lock", None)
    if (
        type(attrs) is not _BoundedAttributes
        or store is None
        or lock is None
        or attrs.max_value_len is not None
        or (attrs.maxlen is not None and len(store) + len(attributes) > attrs.maxlen)
        or attrs._immutable
    ):
        span.set_attributes(attributes)
        return
    with lock:
        if span._end_time is None:
            with attrs._lock:
                store.update(attributes)
            return
    span.set_attributes(attributes)  # ended: the SDK's own warning


def _is_outcome(value: str) -> TypeGuard[Outcome]:
    return value in OUTCOMES


def _ns(t: datetime | float | None) -> int | None:
    if t is None:
        return None
    if isinstance(t, datetime):  # exact to the microsecond: no float rounding between parent and child spans
        t = utc(t)
        return (t - _EPOCH) // timedelta(microseconds=1) * 1000
    return int(t * 1e9)  # seconds since the epoch


class Recorder:
    """Records decisions and labels through one `Telemetry` (tracer, meter, emitter)."""

    def __init__(
        self,
        telemetry,
        *,
        policy_version: str = DEFAULT_POLICY_VERSION,
        app_id: str | None = None,
        device_model: str | None = None,
        cloud_model: str | None = None,
    ):
        self.telemetry = telemetry
        self.policy_version, self.app_id = policy_version, app_id
        self.device_model, self.cloud_model = device_model, cloud_model
        # What scrubbing gave for values seen before (they recur: sessions, task types, versions, models), so
        # most decisions skip the scan and the hash. Bounded; built under the key of this process.
        self._sessions: dict[str, str] = {}  # session id -> its pseudonym
        self._texts: dict[tuple, dict] = {}  # the free text of a decision -> the changes that scrub it
        self._clean_tasks: set[str] = set()  # task types kept as they are (pii.scrub_task_type)

    @classmethod
    def from_env(
        cls, env: dict | None = None, *, tracer_provider=None, meter_provider=None, write_ahead: bool = False, **options
    ) -> Recorder:
        """A recorder that reads the same environment as the command line: `ROUTERSCOPE_KAFKA_BOOTSTRAP`
        (or the local broker recorded under `ROUTERSCOPE_HOME`), Kafka security, and the spool under the home.
        `write_ahead=True`: each event is in the spool file before the call that records it returns, so a
        SIGKILL of the application loses none (docs/instrumentation.md, the loss bound of each mode)."""
        settings = Settings.from_env(env)
        if pii._key is None:  # a key file that cannot be used is said here, at start-up, in one line
            pii.configure(settings.home)
        emitter = KafkaEmitter(producer_config(settings), settings.spool_path, write_ahead=write_ahead)
        return cls(Telemetry(emitter, tracer_provider, meter_provider), **options)

    @property
    def emitter(self):
        return self.telemetry.emitter

    def decision(
        self,
        *,
        task_type: str,
        session_id: str,
        deadline_ms: int,
        elapsed_ms: int = 0,
        request_id: str | None = None,
        input_tokens: int = 0,
        has_pii: bool = False,
        pii_to_cloud: bool = False,
        mode: str = "live",
        network: str | None = None,
        device_tier: str | None = None,
        app_id: str | None = None,
        app_version: str | None = None,
        policy_version: str | None = None,
        start_time: datetime | float | None = None,
    ) -> Decision:
        """One routing decision, as a context manager. `start_time` (a datetime or epoch seconds) records
        a decision after the fact, e.g. from a router's callback; by default the decision starts now."""
        return Decision(
            self,
            task_type=task_type,
            session_id=session_id,
            deadline_ms=deadline_ms,
            elapsed_ms=elapsed_ms,
            request_id=request_id,
            input_tokens=input_tokens,
            has_pii=has_pii,
            pii_to_cloud=pii_to_cloud,
            mode=mode,
            network=network,
            device_tier=device_tier,
            app_id=app_id if app_id is not None else self.app_id,
            app_version=app_version,
            policy_version=policy_version or self.policy_version,
            start_ns=_ns(start_time),
        )

    def adopted(self, task_type: str, route, *args):
        """Record the decision a router makes and returns: `route(*args)` returns `(result, event)` with
        the event already built (our engine's). The same span (current while `route` runs), attempt
        spans, metrics and event as `decision()` + `Decision.adopt()`, without the bookkeeping a
        decision recorded attempt by attempt needs. Returns `(result, the event as sent)`; `(result, None)`
        when `route` returned no event (our engine's shadow request whose device still runs: it is
        adopted when it ends, see `InstrumentedRouter`)."""
        started = time.time_ns()
        parent = otel_context.get_current()
        span = self.telemetry.tracer.start_span(
            f"route {self._scrub_task(task_type)}", parent, kind=SpanKind.INTERNAL, start_time=started
        )
        current = set_span_in_context(span, parent)
        token = otel_context.attach(current)
        try:
            try:
                result, event = route(*args)
            except BaseException as exc:
                if span.is_recording():
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise
            if event is None:  # a shadow request whose device still runs: its event is adopted when it ends
                return result, None
            event, _ = self._finish(span, event, started, None, parent, current, need_end=False)
        finally:
            otel_context.detach(token)
            span.end()
        return result, event

    def label(
        self,
        request_id: str,
        *,
        device_acceptable: bool | None,
        source: LabelSource = "human_review",
        route_correct: bool | None = None,
        labeler: str | None = None,
        event_time: datetime | None = None,
        label_id: str | None = None,
        labeler_is_method: bool = False,
        stored_id: bool = False,
    ) -> LabelEvent:
        """Ground truth for a request, keyed by the same pseudonymised id as its decision (so a label sent for
        the raw id joins it). `label_id` (a UUID; default a new one): a labeler that may send the same verdict
        again, after a crash or from a re-run, gives it its own id, and the warehouse keeps it once. A labeler is
        a person and leaves as a pseudonym; `labeler_is_method=True` says it names a method instead (the offline
        replay's `offline-replay:<method>:judge-<version>:…`, which the judge's audit reads), kept as written,
        scrubbed of personal data like any free text. `stored_id=True`: `request_id` is a decision's id as the
        warehouse stores it (the offline replay labels stored decisions), kept as it is, whichever road the
        decision took. Refused with `InvalidDecision` if it breaks the label contract."""
        if labeler is not None:
            labeler = pii.scrub(labeler) if labeler_is_method else pii.pseudonymise(labeler)
        label = LabelEvent(
            schema_version=1,
            label_id=label_id or str(uuid.uuid4()),
            request_id=request_id if stored_id else pii.pseudonymise_request_id(request_id),
            event_time=event_time or datetime.now(timezone.utc),
            source=source,
            device_acceptable=device_acceptable,
            route_correct=route_correct,
            labeler=labeler,
        )
        _, rules = LABELS.parse(label.to_json())
        if rules:
            raise InvalidDecision(f"invalid label for request {request_id!r}: {', '.join(rules)}")
        self.telemetry.send(names.TOPIC_LABELS, label.request_id, label)
        return label

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every event so far is delivered, or written to the disk spool while the broker is
        unreachable (True: nothing is left in memory), or the timeout passes (False). Decisions waiting
        to be counted and timed in the metrics are recorded first."""
        self.telemetry.record_decisions()
        emitter = self.emitter
        if emitter is None or not hasattr(emitter, "spool"):
            return True if emitter is None else emitter.flush(timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            counts = emitter.counters()
            broker_down = time.monotonic() < getattr(emitter, "_down_until", 0.0)  # the sender is backing off
            if counts["in_flight"] == 0 and (counts["spooled"] == 0 or broker_down):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def close(self, timeout_s: float = 10.0) -> None:
        if self.emitter is not None:
            self.emitter.close(timeout_s)

    # -- the one way out for a decision (ours and everyone else's) ---------------------------------------
    def _finish(
        self,
        span,
        event: DecisionEvent,
        started_ns: int,
        details: list[_AttemptSpan] | None,
        parent,
        current,
        need_end: bool = True,
    ) -> tuple[DecisionEvent, int]:
        """Scrub, annotate the span, send, add the attempt spans; returns the event as sent and the
        end of the last attempt span (computed only if `need_end`). `current` is the context that made
        `span` current (`parent` plus the span): the attempt spans are its children, and while it is
        still the current context, the queued event keeps `parent` and the span's ids rather than the
        live span, and the attempt spans, the count and the latency are left to the telemetry's sender
        thread when it has one (`Telemetry.decided`)."""
        tel = self.telemetry
        ctx = span.get_span_context()
        # The free text of a decision recurs (task types, apps, tiers, versions, models): scrubbed once per
        # combination, the split forms included (pii.split_across), then a dict lookup per decision.
        texts = (
            event.task_type,
            event.app_id,
            event.device_tier,
            event.app_version,
            event.policy_version,
            event.device_model,
            event.cloud_model,
        )
        scrubbed = self._texts.get(texts)
        if scrubbed is None:
            scrubbed = self._scrub_texts(texts)
        changes = dict(scrubbed) if scrubbed else {}
        session = self._sessions.get(event.session_id)
        if session is None:
            session = self._pseudonymise_session(event.session_id)
        if session != event.session_id:
            changes["session_id"] = session
        request_id = event.request_id
        if len(request_id) != 36 or not UUID.fullmatch(request_id):  # a UUID is random: kept
            changes["request_id"] = pii.pseudonymise_request_id(request_id)
            if "@" in request_id or "\uff20" in request_id:
                self._split_with_id(request_id, texts, changes)
        if "@" in event.session_id or "\uff20" in event.session_id:  # half an address: its other half in the text?
            self._split_with_id(event.session_id, texts, changes)
        if ctx.is_valid:
            # lowercase hex, zero-padded: format(id, "032x") / "016x", in half the time
            changes["trace_id"] = ctx.trace_id.to_bytes(16, "big").hex()  # byteorder: optional from Python 3.11
            changes["span_id"] = ctx.span_id.to_bytes(8, "big").hex()
        if changes:
            event = msgspec.structs.replace(event, **changes)  # one copy of the event, not two
        if recording := span.is_recording():
            attributes = {
                _TASK_TYPE: event.task_type,
                _FALLBACK_TYPE: event.fallback_type,
                _REASON: event.reason,
                _DEGRADE_LEVEL: event.degrade_level,
                _CLOUD_CALLS: event.cloud_calls,
                _POLICY_VERSION: event.policy_version,
                _ENTERED_DEVICE: event.entered_device,
                _MODE: event.mode,
                _CONVERSATION: session,
            }
            if event.confidence is not None:
                attributes[_CONFIDENCE] = event.confidence
            if event.threshold is not None:
                attributes[_THRESHOLD] = event.threshold
            _set_attributes(span, attributes)
        now = otel_context.get_current()
        if now is not current:  # the block left another context current: the event carries that one
            tel.send(names.TOPIC_DECISIONS, event.session_id, event, now)
            children_end = (
                attempt_spans(tel.tracer, event, started_ns, session, details, current) if recording else started_ns
            )
            tel.decided(event, None, now)  # the latency's exemplar: the span the block left current
            return event, children_end
        tel.send(names.TOPIC_DECISIONS, event.session_id, event, parent, ctx)
        if not recording:
            children_end, attempts = started_ns, None
        elif tel.deferring():  # the sender thread makes the attempt spans (at their own times) later
            attempts = (started_ns, session, details)
            children_end = _attempts_end(event, started_ns, details) if need_end else started_ns
        else:
            children_end, attempts = attempt_spans(tel.tracer, event, started_ns, session, details, current), None
        tel.decided(event, ctx, parent, attempts)  # counted, timed (the exemplar: the decision span)
        return event, children_end

    def _scrub_task(self, value):
        if not isinstance(value, str) or value in self._clean_tasks:
            return value
        scrubbed = pii.scrub_task_type(value)
        if scrubbed == value:
            if len(self._clean_tasks) >= _CLEAN_IDS_MAX:
                self._clean_tasks.clear()
            self._clean_tasks.add(value)
            return value
        return scrubbed

    def _scrub_texts(self, texts: tuple) -> dict:
        """The changes that scrub the free text of a decision (`_TEXT_FIELDS`, in order), remembered."""
        changes = {}
        task, *rest = texts
        if (scrubbed := self._scrub_task(task)) != task:
            changes["task_type"] = scrubbed
        for name, value in zip(_TEXT_FIELDS[1:], rest, strict=True):
            if value is not None:
                scrubbed = pii.scrub_name(value) if name in pii.NAME_FIELDS else scrub(value)
                if scrubbed != value:
                    changes[name] = scrubbed
        for i in pii.split_across(list(rest)):  # halves of one address or number in two fields
            name = _TEXT_FIELDS[i + 1]
            if name not in changes:
                changes[name] = pii.hash_value(rest[i])
        if len(self._texts) >= _CLEAN_IDS_MAX:
            self._texts.clear()
        self._texts[texts] = changes
        return changes

    @staticmethod
    def _split_with_id(value: str, texts: tuple, changes: dict) -> None:
        """An id holding half an e-mail address (it is pseudonymised): the free-text field holding the other
        half is hashed too (`pii.split_across`), so neither half leaves in clear."""
        for i in pii.split_across([value, *texts[1:]]):
            if i > 0 and texts[i] is not None and _TEXT_FIELDS[i] not in changes:
                changes[_TEXT_FIELDS[i]] = pii.hash_value(texts[i])

    def _pseudonymise_session(self, value: str) -> str:
        session = pii.pseudonymise(value)
        if len(self._sessions) >= _CLEAN_IDS_MAX:
            self._sessions.clear()
        self._sessions[value] = session
        return session


class Decision:
    """One decision being recorded (see the module docstring); use it as a context manager."""

    def __init__(
        self,
        recorder: Recorder,
        *,
        task_type,
        session_id,
        deadline_ms,
        elapsed_ms,
        request_id,
        input_tokens,
        has_pii,
        pii_to_cloud,
        mode,
        network,
        device_tier,
        app_id,
        app_version,
        policy_version,
        start_ns,
    ):
        self.recorder = recorder
        self.task_type, self.session_id = task_type, session_id
        self.deadline_ms, self.elapsed_ms = deadline_ms, elapsed_ms
        self._request_id = request_id
        self.input_tokens, self.has_pii, self.pii_to_cloud = input_tokens, has_pii, pii_to_cloud
        self.mode, self.network, self.device_tier = mode, network, device_tier
        self.app_id, self.app_version, self.policy_version = app_id, app_version, policy_version
        self.start_ns = start_ns
        self.attempts: list[Attempt] = []
        self._details: list[_AttemptSpan] = []
        self.cloud_calls = 0
        self.confidence: float | None = None
        self.threshold: float | None = None
        self.ttft_ms: float | None = None
        self.confidence_source: str | None = None
        self.device_model: str | None = None
        self.cloud_model: str | None = None
        self.output_tokens: int | None = None
        self._cost: float | None = None
        self._capability_miss = False
        self._event: DecisionEvent | None = None
        self._adopted = False
        self.event: DecisionEvent | None = None  # the event as sent, after the block
        # the decision span, and the contexts around it, while the block runs (set by __enter__)
        self._span: Span | None = None
        self._token: Token[Context] | None = None
        self._parent: Context | None = None
        self._current: Context | None = None
        self._children_end = 0

    @property
    def request_id(self) -> str:
        """The request's id: the one given, else a new UUID (made on first use)."""
        if self._request_id is None:
            self._request_id = str(uuid.uuid4())
        return self._request_id

    # -- context manager -----------------------------------------------------------------------------
    def __enter__(self) -> Decision:
        self._started_ns = self.start_ns if self.start_ns is not None else time.time_ns()
        self._perf = time.perf_counter()
        tracer = self.recorder.telemetry.tracer
        self._span = tracer.start_span(
            f"route {self.recorder._scrub_task(self.task_type)}", kind=SpanKind.INTERNAL, start_time=self._started_ns
        )
        self._parent = otel_context.get_current()
        self._current = set_span_in_context(self._span, self._parent)
        self._token = otel_context.attach(self._current)  # current while the block runs
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        span, token = self._span, self._token
        if span is None or token is None:
            raise RuntimeError("Decision.__exit__ without __enter__: use it as `with recorder.decision(...)`")
        try:
            if exc_type is None:
                if self._event is None:
                    raise InvalidDecision(
                        f"decision for request {self.request_id!r} ended without served(): "
                        "say which level served it and why"
                    )
                details = None if self._adopted else self._details
                finished = self.recorder._finish(
                    span,
                    self._event,
                    self._started_ns,
                    details,
                    self._parent,
                    self._current,
                    need_end=self.start_ns is not None,
                )
                self.event, self._children_end = finished
            elif span.is_recording():
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{exc_type.__name__}: {exc}"))
        finally:
            otel_context.detach(token)
            end_ns = None
            if self.start_ns is not None and self._event is not None:  # recorded after the fact
                end_ns = max(self._started_ns + int(self._event.latency_ms * 1e6), self._children_end)
            span.end(end_time=end_ns)
        return False

    # -- attempts ------------------------------------------------------------------------------------
    def _attempt(self, level: int, outcome: str, latency_ms: float, detail: _AttemptSpan) -> None:
        if self._event is not None:
            raise InvalidDecision("an attempt after served(): record every attempt before saying who served")
        if not _is_outcome(outcome):
            raise InvalidDecision(f"outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
        if not latency_ms >= 0:
            raise InvalidDecision(f"latency_ms must be 0 or more, got {latency_ms!r}")
        if len(self.attempts) >= 5:
            raise InvalidDecision("at most 5 attempts per decision (L0, L1, L2, L3, L4)")
        if self.attempts and level < self.attempts[-1].level:
            raise InvalidDecision(
                f"an attempt at level {level} after one at level {self.attempts[-1].level}: "
                "attempt levels never decrease"
            )
        if level == 1 and any(a.level == 1 for a in self.attempts):
            raise InvalidDecision("a second attempt at level 1: the degraded device level runs at most once")
        self.attempts.append(Attempt(level=level, outcome=outcome, latency_ms=float(latency_ms)))
        self._details.append(detail)

    def device_attempt(
        self,
        *,
        level: int = 0,
        outcome: str,
        latency_ms: float,
        confidence: float | None = None,
        threshold: float | None = None,
        confidence_source: str | None = None,
        ttft_ms: float | None = None,
        output_tokens: int | None = None,
        model: str | None = None,
        provider: str | None = None,
        start_time: datetime | float | None = None,
    ) -> None:
        """An attempt on the device: level 0 (native) or 1 (degraded, at most once)."""
        if level not in (0, 1):
            raise InvalidDecision(f"a device attempt is at level 0 or 1, not {level}")
        if self._capability_miss:
            raise InvalidDecision("a device attempt after capability_miss: a capability miss never enters the device")
        self._attempt(level, outcome, latency_ms, _AttemptSpan(model, provider, _ns(start_time), output_tokens))
        if confidence is not None:
            self.confidence = confidence
            self.confidence_source = confidence_source or "logprob"
        if threshold is not None:
            self.threshold = threshold
        if ttft_ms is not None and self.ttft_ms is None:
            self.ttft_ms = ttft_ms
        if output_tokens is not None:
            self.output_tokens = output_tokens
        self.device_model = model or self.device_model or self.recorder.device_model

    def cloud_attempt(
        self,
        *,
        level: int = 2,
        outcome: str,
        latency_ms: float,
        output_tokens: int | None = None,
        model: str | None = None,
        provider: str | None = None,
        cost_usd: float | None = None,
        start_time: datetime | float | None = None,
    ) -> None:
        """A cloud call: level 2 (small model) or 3 (large). Each one counts as a cloud call."""
        if level not in (2, 3):
            raise InvalidDecision(f"a cloud attempt is at level 2 or 3, not {level}")
        if self.has_pii and not self.pii_to_cloud:
            raise InvalidDecision(
                "a cloud attempt for a request with personal data (has_pii=True): it stays on the "
                "device or gets a conservative answer; pass pii_to_cloud=True if policy allows it"
            )
        if cost_usd is not None and not cost_usd >= 0:
            raise InvalidDecision(f"cost_usd must be 0 or more, got {cost_usd!r}")
        self._attempt(level, outcome, latency_ms, _AttemptSpan(model, provider, _ns(start_time), output_tokens))
        self.cloud_calls += 1
        if outcome == "ok":
            self.cloud_model = model or self.recorder.cloud_model
            if output_tokens is not None:
                self.output_tokens = output_tokens
        if cost_usd is not None:
            self._cost = (self._cost or 0.0) + cost_usd

    def canned_answer(self, *, outcome: str = "ok", latency_ms: float = 0.0) -> None:
        """Level 4: the semantic cache, a canned answer or a human hand-off; it ends the chain."""
        self._attempt(4, outcome, latency_ms, _AttemptSpan())

    def capability_miss(self) -> None:
        """The device was not even tried (the request is beyond its capability matrix)."""
        if any(a.level <= 1 for a in self.attempts):
            raise InvalidDecision("capability_miss after a device attempt: a capability miss never enters the device")
        self._capability_miss = True

    # -- the outcome ---------------------------------------------------------------------------------
    def served(
        self,
        *,
        level: int | None = None,
        fallback_type: str = "none",
        reason: str = "default",
        confidence: float | None = None,
        threshold: float | None = None,
        cloud_calls: int | None = None,
        latency_ms: float | None = None,
        output_tokens: int | None = None,
        cost_usd: float | None = None,
        shadow_agree: bool | None = None,
        all_cloud_cost_usd: float | None = None,
        rollout_stage: str | None = None,
        device_stats: dict | None = None,
    ) -> DecisionEvent:
        """Which level served the request and why. Builds the event and checks it against the contract;
        raises `InvalidDecision` naming every broken rule. `level` defaults to the last attempt's.
        Contract v2's ledger fields are optional: what the request would have cost served by the cloud
        alone, the task type's rollout stage, and what the device measured (`DeviceStats` fields)."""
        if self._event is not None:
            raise InvalidDecision("served() twice for one decision")
        if not self.attempts:
            raise InvalidDecision("served() without any attempt: record the attempt that served the request")
        if fallback_type not in FALLBACK_TYPES:
            raise InvalidDecision(f"fallback_type {fallback_type!r} is not one of {', '.join(FALLBACK_TYPES)}")
        if reason not in REASONS:
            raise InvalidDecision(f"reason {reason!r} is not one of {', '.join(REASONS)}")
        last = self.attempts[-1].level
        if level is not None and level != last:
            raise InvalidDecision(
                f"served at level {level}, but the last attempt was at level {last}: "
                "the last attempt's level is the degrade level"
            )
        entered = any(a.level <= 1 for a in self.attempts)
        cost = cost_usd if cost_usd is not None else self._cost
        if self.start_ns is None:
            elapsed = (time.perf_counter() - self._perf) * 1000
        else:  # recorded after the fact: the attempts' time
            elapsed = sum(a.latency_ms for a in self.attempts)
        event = new_decision(  # the newest schema version: v2 adds optional fields only
            event_time=datetime.fromtimestamp(self._started_ns / 1e9, timezone.utc),
            request_id=self.request_id,
            session_id=self.session_id,
            task_type=self.task_type,
            mode=self.mode,
            entered_device=entered,
            fallback_type=fallback_type,
            reason=reason,
            degrade_level=last,
            attempts=list(self.attempts),
            cloud_calls=self.cloud_calls if cloud_calls is None else cloud_calls,
            confidence=confidence if confidence is not None else self.confidence,
            threshold=threshold if threshold is not None else self.threshold,
            deadline_ms=self.deadline_ms,
            elapsed_ms=self.elapsed_ms,
            latency_ms=float(latency_ms if latency_ms is not None else elapsed),
            input_tokens=self.input_tokens,
            output_tokens=output_tokens if output_tokens is not None else (self.output_tokens or 0),
            policy_version=self.policy_version,
            app_id=self.app_id,
            app_version=self.app_version,
            confidence_source=self.confidence_source or ("none" if entered else None),
            ttft_ms=self.ttft_ms,
            network=self.network or None,
            device_tier=self.device_tier,
            has_pii=self.has_pii,
            device_model=self.device_model if entered else None,
            cloud_model=self.cloud_model,
            shadow_agree=shadow_agree,
            cost_usd=cost,
            all_cloud_cost_usd=all_cloud_cost_usd,
            rollout_stage=rollout_stage,
            device_stats=_device_stats(device_stats),
        )
        check(event)
        self._event = event
        return event

    def adopt(self, event: DecisionEvent) -> None:
        """Record an event a router already built (our engine's), as it is: same span and attempt spans,
        scrubbed ids, trace ids, the same emitter. Not re-checked: the loader's quarantine is the net
        for a router's own bugs, and a user's request must not fail because of one."""
        self._event, self._adopted = event, True
        self._request_id = event.request_id


def check(event: DecisionEvent) -> None:
    """Raise `InvalidDecision` naming every field rule and invariant of the contract that `event` breaks."""
    _, rules = DECISIONS.parse(event.to_json())
    if rules:
        reasons = [f"{rule} ({_INVARIANT_DOCS[rule]})" if rule in _INVARIANT_DOCS else rule for rule in rules]
        raise InvalidDecision(f"impossible decision for request {event.request_id!r}: {'; '.join(reasons)}")


class InstrumentedRouter:
    """A Router whose every decision is a span, metrics and a decision event on Kafka, recorded through
    the same `Recorder` any other router uses. `stamp`, when given, takes each event the router builds and
    returns the one to record, before it is scrubbed and sent: what the deployment fixes at decision time
    besides the router's own fields (the labeling design's inclusion probability, `LabelDesign.stamp`)."""

    def __init__(self, router, telemetry: Telemetry, stamp: Callable[[DecisionEvent], DecisionEvent] | None = None):
        self.router, self.telemetry, self.stamp = router, telemetry, stamp
        self.recorder = Recorder(telemetry)
        router.on_event = lambda e: None  # events leave from here, enriched with the trace ids
        router.on_breaker_event = self._breaker_event
        # a shadow request's event when its device ends after the user was served (docs/router.md): a span
        # of its own at that moment, the same event path
        router.on_shadow_event = lambda e: self.recorder.adopted(e.task_type, lambda: (None, self._stamped(e)))

    def _breaker_event(self, event) -> None:
        event = scrub_event(event)  # the instance id and the trigger are free text
        self.telemetry.send(names.TOPIC_BREAKERS, event.instance_id, event)

    def _stamped(self, event: DecisionEvent) -> DecisionEvent:
        return event if self.stamp is None else self.stamp(event)

    def _route_stamped(self, request):
        response, event = self.router.route(request)
        return response, None if event is None else self._stamped(event)

    def route(self, request):
        route = self.router.route if self.stamp is None else self._route_stamped
        return self.recorder.adopted(request.task_type, route, request)
