"""A LiteLLM model list that answers offline (`mock_response` deployments on a closed loopback port): a
device group of three (one answering, one whose context window is too small, one broken) and three cloud
deployments (one of them down)."""

from __future__ import annotations

OFFLINE = {"api_base": "http://127.0.0.1:9/v1", "api_key": "unused"}


def deployment(name, model, answer):
    return {"model_name": name, "litellm_params": {"model": model, **OFFLINE, "mock_response": answer}}


MODEL_LIST = [
    deployment("device", "openai/gemma-3-270m", "on device"),
    deployment("device-small-window", "openai/gemma-3-270m-2k", "litellm.ContextWindowExceededError"),
    deployment("device-broken", "openai/gemma-3-270m-broken", "litellm.InternalServerError"),
    deployment("cloud-small", "openai/gpt-4o-mini", "small"),
    deployment("cloud-small-down", "openai/gpt-4o-mini", "litellm.InternalServerError"),
    deployment("cloud-large", "openai/gpt-4o", "large"),
]
DEVICE = ["device", "device-small-window", "device-broken"]
METADATA = {"session_id": "s1", "task_type": "short_reply"}
MESSAGES = [{"role": "user", "content": "hello"}]
