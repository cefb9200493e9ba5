"""SIMULATED misbehaving cloud: a loopback HTTP server that answers a chat completion one byte at a time
(docs/router.md, "The router enforces the budget"). Used by the hostile-backend tests and
`bench/router_budget.py` to show that `OpenAICloud`'s total deadline holds where a per-read timeout
did not."""

from __future__ import annotations

import json
import socket
import threading


class Trickler:
    """Serves on 127.0.0.1:`port` until `close()`: every request gets a valid chat completion whose headers
    (`where = "headers"`) or body (`where = "body"`) arrive one byte every `every_s` seconds."""

    def __init__(self, where: str = "body", every_s: float = 0.05):
        if where not in ("headers", "body"):
            raise ValueError("where: headers or body")
        self.where, self.every_s = where, every_s
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self.server.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn) -> None:
        body = json.dumps({"choices": [{"message": {"content": "trickled " * 40}}]}).encode()
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        slow, fast = (head + body, b"") if self.where == "headers" else (body, head)
        try:
            conn.recv(65536)
            conn.sendall(fast)
            for i in range(len(slow)):
                if self.stop.wait(self.every_s):
                    return
                conn.sendall(slow[i : i + 1])
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.server.close()
