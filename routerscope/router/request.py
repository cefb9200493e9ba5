"""What the router is asked and what it answers: a `Request` (the gateway's fields, its budget and its
declarations for the capability matrix) and a `Response` (the text, the level that served it, and by whom)."""

from __future__ import annotations

from dataclasses import dataclass

from routerscope.router.backends import Prompt


@dataclass(frozen=True)
class Request:
    task_type: str
    text: str
    session_id: str
    deadline_ms: int = 8000
    elapsed_ms: int = 0
    has_pii: bool = False
    network: str = "wifi"
    device_tier: str | None = None
    input_tokens: int | None = None
    expected_output_tokens: int | None = None  # the gateway's estimate; None: the task's output cap
    request_id: str | None = None
    app_id: str | None = None
    messages: tuple[dict, ...] | list[dict] | None = (
        None  # chat messages (system prompt + history); `text` becomes them
    )
    tools: tuple[str, ...] | None = None  # the tools a tool call would use (capability matrix: the whitelist)
    files: int | None = None  # how many files a code request's context spans (capability matrix: single file)

    def __post_init__(self):
        if self.messages is not None:  # the backends send the messages; everything else reads them as text
            object.__setattr__(self, "text", Prompt(self.messages))


@dataclass(frozen=True)
class Response:
    text: str
    level: int
    served_by: str  # device | cloud | fallback
    partial: bool = False  # a device answer cut to its last complete sentence (reason = truncated)
