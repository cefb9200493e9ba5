"""The device model in a child process: `WorkerDevice` is a `DeviceBackend` whose `LlamaDevice` lives in
a separate Python process (`python -m routerscope.router.model_worker`), spoken to over its stdin/stdout in JSON lines.

Why: a native crash in the model (a segfault in ggml, a build for the wrong CPU) kills only the worker.
In a process that also holds the embedded warehouse, chDB's own crash handler would catch the signal and
freeze the whole process instead of letting it die; with the worker, the parent sees the pipe close,
records the request's device attempt as an `error` (or raises `ModelCrashed` at start-up) and goes on.
The worker dies with its parent (`routerscope.core.procs.spawn`), also when the parent is SIGKILLed.

The protocol: one request line `{"op": "generate", "prompt": …, "kwargs": {…}}` → one reply line with the
`DeviceResult` fields and the device's current `ttft_ms` / `tps` / `prefill_tps` estimates; `{"op": "count",
"prompt": …, "messages": […] | null}` → `{"tokens": n}`, the model's own count (`LlamaDevice.count_tokens`), so a
personal-data request is measured in the model's tokens rather than by the router's upper bound; asked only while
the worker is idle (a count never waits behind a generation: None, and the router uses its bound). The router
holds a call to the worker to its level's timeout on its guard pool (the pipe cannot be cancelled; the
model inside stops at its own deadline: docs/router.md). Keyword arguments are passed
through unchanged, so the worker follows `LlamaDevice.generate`'s signature.
"""

from __future__ import annotations

import json
import os
import select
import sys
import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import IO

from routerscope.core import procs
from routerscope.core.errors import RouterscopeError
from routerscope.router.backends import DeviceResult, LlamaDevice, Prompt

READY_TIMEOUT_S = 120.0
GRACE_S = 30.0  # on top of a call's own timeout: a reply later than that means a hung model


def _piped(stream: IO[bytes] | None) -> IO[bytes]:
    """A child's stdin or stdout, spawned as a pipe."""
    if stream is None:
        raise ModelCrashed("the model worker was started without its pipes")
    return stream


class ModelCrashed(RouterscopeError):
    """The model worker died or stopped answering."""


class WorkerDevice:
    """`LlamaDevice(model_path, **options)` in a child process; same attributes and `generate`."""

    def __init__(
        self,
        model_path: Path | str,
        *,
        log_path: Path | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
        **options,
    ):
        self.model = options.get("model_name", "gemma-3-270m-q4_k_m")
        self.ttft_ms, self.tps = 150.0, 40.0
        self.prefill_tps, self.context_tokens = None, options.get("n_ctx", 2048)  # the worker reports its prefill
        self.crashed: str | None = None
        self._lock = threading.Lock()
        self._log = open(log_path, "ab") if log_path else None
        self.process = procs.spawn(
            [sys.executable, "-m", "routerscope.router.model_worker", str(model_path), json.dumps(options)],
            stdin=-1,
            stdout=-1,
            stderr=self._log if self._log else -3,  # PIPE, PIPE, DEVNULL
        )
        self._watch()
        hello = self._read_line(ready_timeout_s)
        if hello is None or not hello.get("ready"):
            self.close()
            raise ModelCrashed(
                f"the model worker did not start ({self.crashed or hello}); "
                + (f"see {log_path}" if log_path else "re-run to see the model's own error")
            )
        self.model = hello.get("model", self.model)

    def _watch(self) -> None:
        # poll, not select: select() refuses descriptors above 1024, and a process that holds the
        # embedded warehouse and a broker connection has many open
        self._stdin, self._stdout = _piped(self.process.stdin), _piped(self.process.stdout)
        self._poller = select.poll()
        self._poller.register(self._stdout, select.POLLIN | select.POLLHUP | select.POLLERR)

    def _read_line(self, timeout_s: float) -> dict | None:
        """The worker's next reply, or None (and `crashed` says why) when it died, hung or talked nonsense."""
        if not self._poller.poll(timeout_s * 1000):
            self.crashed = f"no answer within {timeout_s:.0f} s"
            return None
        line = self._stdout.readline()
        if not line:
            self.crashed = self._exit_description()
            return None
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            self.crashed = f"sent an unreadable reply ({line[:80]!r})"
            return None
        return reply

    def _exit_description(self) -> str:
        try:
            code = self.process.wait(5)
        except Exception:
            return "stopped answering"
        return f"exited with {code}" + (f" (signal {-code})" if code and code < 0 else "")

    def generate(self, prompt: str, **kwargs) -> DeviceResult:
        """`LlamaDevice.generate` in the worker. The router's decision point (`decide`, a callback) is
        asked across the pipe: the worker sends its question, this process answers it."""
        started = time.perf_counter()
        decide = kwargs.pop("decide", None)
        wait_s = kwargs.get("timeout_ms", 60_000) / 1000 + GRACE_S
        with self._lock:
            if self.crashed is None:
                try:
                    self._send({"op": "generate", "prompt": prompt, "kwargs": kwargs, "decide": decide is not None})
                    while (reply := self._read_line(wait_s)) is not None and "decide" in reply:
                        self._send({"fits": bool(decide(*reply["decide"]))})
                except OSError:  # a broken pipe: it died before or while reading the request
                    self.crashed, reply = self._exit_description(), None
                if reply is None:  # dead or hung: never ask it again
                    self._kill()
                else:
                    try:
                        self.ttft_ms, self.tps = reply.pop("ttft_estimate_ms"), reply.pop("tps_estimate")
                        self.prefill_tps = reply.pop("prefill_estimate", self.prefill_tps)
                        return DeviceResult(**reply)
                    except (KeyError, TypeError):  # a reply of another shape: a worker out of step
                        self.crashed = f"sent a reply without a result ({sorted(reply)[:8]})"
                        self._kill()
        # the model runtime is gone for good: to the router that is a device that can no longer load its
        # model, which opens the device breaker at once
        # (docs/sources.md#seed-000: device unavailable is the serious failure)
        return DeviceResult(
            "", None, "none", 0, 0.0, (time.perf_counter() - started) * 1000, "error", error_kind="load_failure"
        )

    def count_tokens(self, prompt: str) -> int | None:
        """The model's own count of `prompt` (its chat messages too), asked of the worker; None when the worker
        is busy generating or gone (the router then uses its upper bound: docs/router.md)."""
        if self.crashed is not None or not self._lock.acquire(blocking=False):
            return None
        try:
            messages = getattr(prompt, "messages", None)
            self._send({"op": "count", "prompt": str(prompt), "messages": list(messages) if messages else None})
            reply = self._read_line(GRACE_S)
            tokens = reply.get("tokens") if reply is not None else None
            if reply is None:
                self._kill()
            return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else None
        except OSError:
            self.crashed = self._exit_description()
            return None
        finally:
            self._lock.release()

    def _send(self, message: dict) -> None:
        self._stdin.write((json.dumps(message) + "\n").encode())
        self._stdin.flush()

    def _kill(self) -> None:
        procs.stop(self.process, timeout_s=2)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self._stdin.close()  # EOF: the worker exits by itself
                self.process.wait(5)
            except Exception:
                pass
        self._kill()
        procs.close_quietly(self._stdin, self._stdout)
        if self._log:
            self._log.close()

    def __enter__(self) -> WorkerDevice:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str]) -> int:
    """The worker: load the model, answer `generate` lines until stdin closes."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything the native library prints goes to the log, never into the protocol
    model_path, options = argv[0], json.loads(argv[1])
    device = LlamaDevice(model_path, **options)
    out.write(json.dumps({"ready": True, "model": device.model}) + "\n")

    def remote_decide(*question) -> bool:  # the router's decision point, answered by the parent
        out.write(json.dumps({"decide": list(question)}) + "\n")
        return bool(json.loads(sys.stdin.readline())["fits"])

    while line := sys.stdin.readline():
        request = json.loads(line)
        if request.get("op") == "count":
            messages = request.get("messages")
            text = Prompt(messages) if messages else request["prompt"]
            out.write(json.dumps({"tokens": device.count_tokens(text)}) + "\n")
            continue
        options = dict(request["kwargs"], decide=remote_decide) if request.get("decide") else request["kwargs"]
        result = device.generate(request["prompt"], **options)
        reply = {f.name: getattr(result, f.name) for f in fields(result)}
        estimates = {
            "ttft_estimate_ms": device.ttft_ms,
            "tps_estimate": device.tps,
            "prefill_estimate": device.prefill_tps,
        }
        out.write(json.dumps({**reply, **estimates}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
