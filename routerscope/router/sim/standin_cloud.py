"""The stand-in cloud: `python -m llama_cpp.server` on loopback, serving a GGUF model through the
OpenAI-compatible API (for tests and the demo; a real deployment points OpenAICloud elsewhere)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from routerscope.core import procs
from routerscope.core.errors import RouterscopeError


class StandInCloud:
    def __init__(self, model_path: Path, log_path: Path, port: int | None = None, n_threads: int = 1):
        self.port = port or procs.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log_path, "ab")
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
        try:
            procs.wait_ready(
                self.process,
                lambda: procs.http_ok(f"{self.url}/v1/models"),
                what="the stand-in cloud",
                log_path=self._log.name,
                timeout_s=timeout_s,
            )
        except RouterscopeError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        procs.stop(self.process)
        self._log.close()
