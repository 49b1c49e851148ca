"""Helpers shared by the agent tests (imported by conftest and test modules)."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from typing import Any

from farm.config import AgentConfig
from farm.tasks.model import Environment, Task, VerifierSpec


# A login shell sources ~/.profile; the host's (pyenv) takes ~0.4 s, a sandbox's does not.
QUIET_ENV = dict(os.environ, HOME=tempfile.mkdtemp(prefix="farm-agent-home-"))


def subprocess_exec(command, timeout_s=120.0, cwd=None, env=None, merge_stderr=False, output_cap=1 << 20):
    """exec_fn for running leaf_tools in-process: a real bash in its own process group."""
    started = time.monotonic()
    if env is None:
        env = QUIET_ENV
    proc = subprocess.Popen(
        ["/bin/bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    out, err = out or b"", err or b""
    total = len(out) + len(err)

    def cap(data: bytes) -> bytes:
        if len(data) <= output_cap:
            return data
        half = output_cap // 2
        return data[:half] + b"\n[... %d bytes truncated ...]\n" % (len(data) - 2 * half) + data[-half:]

    return {
        "exit_code": 124 if timed_out else proc.returncode,
        "stdout": cap(out).decode("utf-8", "replace"),
        "stderr": cap(err).decode("utf-8", "replace"),
        "timed_out": timed_out,
        "duration_s": time.monotonic() - started,
        "truncated": len(out) > output_cap or len(err) > output_cap,
        "output_bytes": total,
    }


async def sandbox_file(sb: Any, path: str) -> bytes | None:
    """Contents of a file inside the sandbox, or None when it does not exist."""
    if not (await sb.call("stat", path=path)).get("exists"):
        return None
    return await sb.read_file(path)


def make_task(workdir: str = "/app", instruction: str = "Fix the bug.", timeout_s: float = 600.0, **kw: Any) -> Task:
    return Task(
        benchmark="test", task_id=kw.pop("task_id", "t1"), instruction=instruction,
        environment=Environment(workdir=workdir, build_steps=()), verifier=VerifierSpec(),
        agent_timeout_s=timeout_s, **kw,
    )


def agent_cfg(**kw: Any) -> AgentConfig:
    kw.setdefault("tokenizer", "bytes")
    return AgentConfig(**kw)
