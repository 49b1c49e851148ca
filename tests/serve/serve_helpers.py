"""Helpers shared by the serving tests (imported by conftest and test modules)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 900.0


def serve_stack_missing() -> str | None:
    try:
        import vllm  # noqa: F401
        from ray.serve.llm import LLMConfig  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"the CPU serving stack is not installed here ({type(exc).__name__}: {exc}); run scripts/install-serve-cpu.sh"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
