"""Shared pieces for the agent tests: a real command runner, sandboxes, and policy endpoints."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import make_task

from farm.agent.llm import LLMClient
from farm.agent.policies.server import PolicyServer, start_policy_server
from farm.config import ModelConfig
from farm.sandbox.local.sandbox import LocalSandbox
from tests.support.requirements import require


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
async def sandbox(tmp_path: Path):
    """(sandbox, task): a started real LocalSandbox (bubblewrap) whose workdir is /app."""
    require("bwrap")  # skip, naming it, where bubblewrap is missing (instead of an error)
    task = make_task(workdir="/app")
    sb = LocalSandbox(task, root_dir=tmp_path / "sbx")
    await sb.start()
    yield sb, task
    await sb.close()


@pytest.fixture
def policy(tmp_path: Path) -> Callable[..., PolicyServer]:
    servers: list[PolicyServer] = []

    def start(turns: Any = None, name: str = "scripted") -> PolicyServer:
        script = None
        if name == "scripted":
            script = tmp_path / f"script{len(servers)}.json"
            script.write_text(json.dumps(turns))
        srv = start_policy_server(name, script=str(script) if script else None)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.close()


@pytest.fixture
def llm_for():
    clients: list[LLMClient] = []

    def make(server: PolicyServer, task_id: str = "t1", **model: Any) -> LLMClient:
        # no in-trial retries unless a test asks: endpoint-failure tests expect the failure at once
        cfg = ModelConfig(name="policy", base_url=server.base_url, max_retries=model.pop("max_retries", 0),
                          request_retry_budget_s=model.pop("request_retry_budget_s", 0), **model)
        client = LLMClient(cfg, session_id="sess-1", task_id=task_id)
        clients.append(client)
        return client

    yield make
