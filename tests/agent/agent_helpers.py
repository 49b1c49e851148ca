"""Helpers shared by the agent tests (imported by conftest and test modules)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from farm.config import AgentConfig
from farm.sandbox.inside import leaf_tools
from farm.tasks.model import Environment, Task, VerifierSpec


def subprocess_exec(command, timeout_s=120.0, cwd=None, env=None, merge_stderr=False, output_cap=1 << 20):
    """exec_fn for running leaf_tools in-process: a real bash in its own process group."""
    started = time.monotonic()
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


class FakeSandbox:
    """Thin in-memory stand-in for a sandbox: the real leaf_tools over a host temp directory.

    The task's workdir is mapped onto ``root`` (tools see ``root`` as their workdir). Used only
    where a test needs to break the sandbox on purpose or LocalSandbox cannot run.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        # A login shell sources ~/.profile; the host's may be slow (pyenv), a sandbox's is not.
        home = root.parent / "home"
        home.mkdir(exist_ok=True)
        self.env = dict(os.environ, HOME=str(home))
        self.closed = False
        self.requests = 0

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        from farm.sandbox.base import SandboxClosedError

        if self.closed:
            raise SandboxClosedError("FakeSandbox is closed")
        assert op == "tool", op
        self.requests += 1
        def exec_fn(command, timeout_s=120.0, cwd=None, env=None, merge_stderr=False, output_cap=1 << 20):
            return subprocess_exec(command, timeout_s, cwd, env or self.env, merge_stderr, output_cap)

        return await asyncio.to_thread(
            leaf_tools.run_tool, args["name"], args["args"], str(self.root), args["limits"], exec_fn
        )

    async def close(self) -> None:
        self.closed = True


def make_task(workdir: str = "/app", instruction: str = "Fix the bug.", timeout_s: float = 600.0, **kw: Any) -> Task:
    return Task(
        benchmark="test", task_id=kw.pop("task_id", "t1"), instruction=instruction,
        environment=Environment(workdir=workdir, build_steps=()), verifier=VerifierSpec(),
        agent_timeout_s=timeout_s, **kw,
    )


def agent_cfg(**kw: Any) -> AgentConfig:
    kw.setdefault("tokenizer", "bytes")
    return AgentConfig(**kw)
