"""Requests as chat messages (system prompt + history) and a cloud reached the way real deployments
need: an Azure-style full endpoint URL with its `api-version` query and an `api-key` header. The
cloud here is a real HTTP server on loopback that records what it received."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from routerscope.router.backends import DeviceResult, OpenAICloud, Prompt, chat_messages, degrade_prompt
from routerscope.router.engine import Request, Router
from routerscope.router.sim.backends import InstantDevice

MESSAGES = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
]


@pytest.fixture
def cloud_server():
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append(
                {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
            )
            reply = json.dumps(
                {"choices": [{"message": {"content": "Rome."}}], "usage": {"completion_tokens": 2}}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


def test_messages_and_azure_style_endpoint_and_headers_reach_the_cloud(cloud_server):
    base, received = cloud_server
    endpoint = f"{base}/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21"
    cloud = OpenAICloud(endpoint, {2: "gpt-4o-mini", 3: "gpt-4o"}, headers={"api-key": "azure-secret"})
    device = InstantDevice(DeviceResult("", None, "none", 0, 1.0, 5.0, "error"))  # the device fails: L0 → L2
    response, event = Router(device, cloud).route(
        Request(task_type="short_reply", text="", session_id="s1", messages=MESSAGES)
    )
    assert (response.text, event.degrade_level, event.fallback_type) == ("Rome.", 2, "error")
    (call,) = received
    assert call["path"] == "/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21"
    assert call["headers"]["api-key"] == "azure-secret" and "authorization" not in call["headers"]
    assert call["body"]["messages"] == MESSAGES
    assert event.input_tokens == len("\n".join(m["content"] for m in MESSAGES)) // 4


def test_a_base_url_gets_the_openai_path_and_a_bearer_key(cloud_server):
    base, received = cloud_server
    result = OpenAICloud(base + "/", api_key="k", headers={"X-Gateway": "edge-1"}).complete(
        "hello", level=2, max_tokens=8, timeout_ms=5000
    )
    assert result.outcome == "ok" and received[0]["path"] == "/v1/chat/completions"
    assert received[0]["headers"]["authorization"] == "Bearer k" and received[0]["headers"]["x-gateway"] == "edge-1"
    assert received[0]["body"]["messages"] == [{"role": "user", "content": "hello"}]


def test_l1_keeps_the_system_prompt_and_the_last_turn_and_drops_the_oldest_history():
    long_history = (
        [{"role": "system", "content": "sys"}]
        + [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "x" * 40} for i in range(6)]
        + [{"role": "user", "content": "the question"}]
    )
    prompt = Prompt(long_history)
    cut = degrade_prompt(prompt)
    assert len(cut) <= int(len(prompt) * 0.7)
    messages = chat_messages(cut)
    assert messages[0] == long_history[0] and messages[-1] == long_history[-1]
    assert messages[1:-1] == long_history[-1 - (len(messages) - 2) : -1], "the most recent history is what stays"
    # a plain text loses its middle: of the 7 characters kept, the cut's mark takes 3, a third of the rest comes
    # from the head (1) and the rest from the end (3), where a question usually is
    assert degrade_prompt("abcdefghij") == "a\n…\nhij"
    tiny = degrade_prompt(Prompt([{"role": "user", "content": "x" * 100}]))
    assert chat_messages(tiny) == [{"role": "user", "content": "x" * 22 + "\n…\n" + "x" * 45}]


@pytest.mark.parametrize("bad", [[], [{"role": "user"}], [{"role": "user", "content": 3}]])
def test_malformed_messages_are_refused_when_the_request_is_made(bad):
    with pytest.raises(ValueError, match="messages"):
        Request(task_type="short_reply", text="", session_id="s", messages=bad)
