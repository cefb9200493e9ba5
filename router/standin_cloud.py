"""The stand-in cloud: `python -m llama_cpp.server` on loopback, serving a GGUF model through the
OpenAI-compatible API (for tests and the demo; a real deployment points OpenAICloud elsewhere)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from routerscope.errors import RouterscopeError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandInCloud:
    def __init__(self, model_path: Path, log_path: Path, port: int | None = None, n_threads: int = 1):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log_path, "ab")
        from routerscope import procs

        self.process = procs.spawn(  # dies with its parent, also on SIGKILL
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(model_path),
                "--model_alias",
                "cloud-small",
                "--chat_format",
                "gemma",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--n_threads",
                str(n_threads),
                "--n_ctx",
                "1024",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout_s: float = 120) -> StandInCloud:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RouterscopeError(
                    f"the stand-in cloud exited with {self.process.returncode}; see {self._log.name}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/v1/models", timeout=1) as r:
                    json.loads(r.read())
                    return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RouterscopeError(f"the stand-in cloud did not answer within {timeout_s:.0f} s; see {self._log.name}")

    def stop(self) -> None:
        from routerscope import procs

        procs.stop(self.process)
        self._log.close()
