"""The device model in a worker process (`routerscope.router.model_worker`), and the portable model build.

A native crash of the model must end one request's device attempt, never the process that holds the
embedded warehouse (chDB's crash handler would freeze it), and never leave a process behind."""

from __future__ import annotations

import os
import signal
import time

import pytest

from routerscope.router.backends import gemma_path
from routerscope.router.engine import Request, Router
from routerscope.router.model_worker import ModelCrashed, WorkerDevice
from routerscope.router.policy import DEFAULT_POLICY, PolicyStore

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return gemma_path(tmp_path_factory.mktemp("models-home"))


def test_the_model_build_is_portable_no_amx_no_avx512():
    """A native build on a CPU with AMX segfaults in ggml_backend_amx_mul_mat elsewhere: the bootstrap
    builds for a portable x86-64 target (AVX2/FMA/F16C) and the library says so."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    assert "AVX2 = 1" in info, info
    assert "AMX" not in info and "AVX512 = 1" not in info and "AVX512" not in info.replace("AVX512 = 0", ""), info


def test_the_worker_answers_like_the_in_process_model_with_logprob_confidence(model, tmp_path):
    with WorkerDevice(model, log_path=tmp_path / "worker.log", n_ctx=512, n_threads=1) as device:
        result = device.generate(
            "Reply with one word: hello", max_tokens=8, timeout_ms=60_000, degraded=False, commit_tokens=120
        )
        assert result.outcome == "ok" and result.text.strip()
        assert result.confidence_source == "logprob" and 0.0 < result.confidence <= 1.0
        assert device.model == "gemma-3-270m-q4_k_m" and device.ttft_ms > 0 and device.tps > 0
        pid = device.process.pid
    assert device.process.poll() is not None and not _alive(pid)  # closing stops it


def test_the_decision_point_is_asked_across_the_pipe_and_a_no_stops_the_device(model, tmp_path):
    """The decision point of docs/sources.md#seed-000: the router's `decide` callback lives in this process; the
    worker asks it at the first token past `decision_at_ms` and stops generating on a no (a preempted timeout)."""
    questions = []

    def decide(elapsed_ms, tokens, ttft_ms):
        questions.append((elapsed_ms, tokens, ttft_ms))
        return False

    with WorkerDevice(model, log_path=tmp_path / "worker.log", n_ctx=512, n_threads=1) as device:
        result = device.generate(
            "Write a long story about a lighthouse.",
            max_tokens=64,
            timeout_ms=60_000,
            degraded=False,
            commit_tokens=120,
            decide=decide,
            decision_at_ms=0.0,
        )
        assert len(questions) == 1 and questions[0][1] >= 1  # asked once, after a first token
        assert result.outcome == "timeout" and result.preempted and not result.committed
        assert result.tokens_out < 64
        again = device.generate(
            "Reply with one word: hello", max_tokens=8, timeout_ms=60_000, degraded=False, commit_tokens=120
        )
        assert again.outcome == "ok"  # the protocol is in step after a decision


def test_a_crashed_worker_is_a_device_error_and_the_router_serves_from_the_cloud(model, tmp_path):
    from routerscope.router.sim.backends import InstantCloud

    with WorkerDevice(model, log_path=tmp_path / "worker.log", n_ctx=512, n_threads=1) as device:
        os.kill(device.process.pid, signal.SIGSEGV)  # what a native crash in ggml looks like from outside
        device.process.wait(10)
        started = time.monotonic()
        router = Router(device, InstantCloud(), policy=PolicyStore(DEFAULT_POLICY))
        response, event = router.route(
            Request(task_type="short_reply", text="hello", session_id="s", deadline_ms=8000, expected_output_tokens=8)
        )
        assert time.monotonic() - started < 5  # no hang waiting for a dead process
        assert device.crashed and "signal 11" in device.crashed
        assert event.attempts[0].outcome == "error" and response.served_by == "cloud"


def test_a_model_that_cannot_load_raises_a_one_line_error_and_leaves_no_process(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file")
    with pytest.raises(ModelCrashed, match="the model worker did not start.*exited with 1") as caught:
        WorkerDevice(broken, log_path=tmp_path / "worker.log")
    assert "\n" not in str(caught.value)
    assert "broken.gguf" in (tmp_path / "worker.log").read_text()  # the model's own error is in the log


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("says", ["segfault imminent", "[1, 2]", '{"text": "half a result"}'])
def test_a_worker_that_answers_nonsense_is_a_device_error_not_an_exception(says):
    """A worker out of step (a native library writing to stdout, a protocol bug) must end as a failed
    device attempt, like a crash, never as an exception out of the router's call."""
    import sys
    import threading

    from routerscope.core import procs

    device = WorkerDevice.__new__(WorkerDevice)  # the protocol side only, with a stand-in worker process
    script = f"import sys, time; sys.stdin.readline(); print({says!r}, flush=True); time.sleep(30)"
    device.process = procs.spawn([sys.executable, "-c", script], stdin=-1, stdout=-1)
    device._watch()
    device._lock, device._log, device.crashed, device.model = threading.Lock(), None, None, "stand-in"
    started = time.monotonic()
    result = device.generate("hello", max_tokens=8, timeout_ms=1000, degraded=False, commit_tokens=120)
    assert (result.outcome, result.error_kind) == ("error", "load_failure")
    assert device.crashed and time.monotonic() - started < 10
    assert device.process.poll() is not None  # stopped, never asked again
    device.close()


def test_a_hung_worker_is_killed_after_the_calls_timeout_plus_the_grace_and_is_a_device_error(monkeypatch):
    """A model stuck in native code answers nothing: the call must end (timeout + grace), the worker be
    killed, and the attempt be a device error that opens the breaker, not a request that hangs."""
    import sys
    import threading

    from routerscope.core import procs
    from routerscope.router import model_worker

    monkeypatch.setattr(model_worker, "GRACE_S", 1.0)
    device = WorkerDevice.__new__(WorkerDevice)
    script = "import sys, time; sys.stdin.readline(); time.sleep(60)"  # reads the request, never answers
    device.process = procs.spawn([sys.executable, "-c", script], stdin=-1, stdout=-1)
    device._watch()
    device._lock, device._log, device.crashed, device.model = threading.Lock(), None, None, "stand-in"
    started = time.monotonic()
    result = device.generate("hello", max_tokens=8, timeout_ms=500, degraded=False, commit_tokens=120)
    waited = time.monotonic() - started
    assert (result.outcome, result.error_kind) == ("error", "load_failure")
    assert device.crashed == "no answer within 2 s" and 1.4 < waited < 10
    assert device.process.poll() is not None  # killed
    again = device.generate("hello", max_tokens=8, timeout_ms=500, degraded=False, commit_tokens=120)
    assert again.outcome == "error" and time.monotonic() - started - waited < 1  # never asked again
    device.close()


def test_the_worker_counts_tokens_as_the_model_does_and_never_waits_behind_a_generation(model, tmp_path):
    """A device behind the model worker had no tokenizer: a personal-data request was judged by the router's upper
    bound (a token a byte: 5x English). The worker now counts in the model's own tokens, chat messages included;
    while it generates, the count is None at once and the bound decides."""
    import threading

    from routerscope.router.backends import LlamaDevice, Prompt
    from routerscope.router.engine import token_bound

    local = LlamaDevice(model, n_ctx=512, n_threads=1)
    chat = Prompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Call +1 415 555 0100"}])
    with WorkerDevice(model, log_path=tmp_path / "worker.log", n_ctx=512, n_threads=1) as device:
        for text in ("Reply with one word: hello", "我的手机号码是一三八零零一三八零零零", chat):
            assert device.count_tokens(text) == local.count_tokens(text) <= token_bound(text)
        busy = threading.Thread(
            target=device.generate,
            args=("Write a long story about a lighthouse.",),
            kwargs=dict(max_tokens=64, timeout_ms=20_000, degraded=False, commit_tokens=120),
        )
        busy.start()
        time.sleep(0.2)
        assert device.count_tokens("hello") is None
        busy.join(30)
        assert device.count_tokens("hello") == local.count_tokens("hello")
