"""Helpers shared by the serving tests (imported by conftest and test modules)."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.shared import env_flag
from tests.support.endpoints import free_port  # noqa: F401 - the serve tests take it from here

# `farm serve model=tiny-cpu` was ready after 114 s alone on 2 cores (2026-12-01); the fixture
# gives up, with the server's log, well after a 2x slowdown under load.
START_TIMEOUT_S = 900.0
REQUIRE_SERVE_ENV = "FARM_REQUIRE_SERVE"  # set by `make test`: a missing serving stack fails
SERVE_STACK = ("vllm", "ray.serve.llm")


def serve_stack_missing(modules: tuple[str, ...] = SERVE_STACK) -> str | None:
    """One line naming the first module of the serving stack that cannot be imported, or None."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - vLLM fails with more than ImportError on a broken install
            return (f"the CPU serving stack is not installed here ({name}: {type(exc).__name__}: {exc}); "
                    "run scripts/install-serve-cpu.sh")
    return None


def require_serve_stack(modules: tuple[str, ...] = SERVE_STACK) -> None:
    """Skip the calling test when the stack is missing; fail instead under FARM_REQUIRE_SERVE=1."""
    missing = serve_stack_missing(modules)
    if missing is None:
        return
    if env_flag(REQUIRE_SERVE_ENV):
        pytest.fail(f"{missing}; {REQUIRE_SERVE_ENV}=1 requires it", pytrace=False)
    raise pytest.skip.Exception(missing, _use_item_location=True)  # reported at the test, as a mark would be


def serve_env() -> dict[str, str]:
    return dict(
        os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0",
        PYTHONUNBUFFERED="1",
    )


@dataclass
class TinyServer:
    base_url: str
    model: str
    model_dir: Path
    start_s: float
    log: Path


def stop_process(proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: only what it started
        proc.wait(timeout=30)


# the four marker tokens: a large logit bias makes the tiny model spell each as its single token,
# which the streaming parser matches by id (see test_tiny_cpu_integration.py)
MARKERS = ("<think>", "</think>", "<tool_call>", "</tool_call>")


def marker_bias(model_dir: Path) -> dict[str, int]:
    added = json.loads((model_dir / "tokenizer.json").read_text())["added_tokens"]
    return {str(t["id"]): 100 for t in added if t["content"] in MARKERS}
