"""Helpers shared by the agent tests (imported by conftest and test modules)."""

from __future__ import annotations

import io
import tempfile
from typing import Any

from farm.config import AgentConfig
from farm.sandbox.inside import server
from farm.tasks.model import Environment, Task, VerifierSpec

# A login shell sources ~/.profile; the host's (pyenv) takes ~0.4 s, a sandbox's does not.
QUIET_HOME = tempfile.mkdtemp(prefix="farm-agent-home-")


def tool_agent() -> server.Agent:
    """The real sandbox agent, in-process: its ``op_tool`` is what a sandbox's ``tool`` request runs.

    Without the background reaper, which would reap other children of the test process."""
    return server.Agent(io.BytesIO(), reap=False)


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
