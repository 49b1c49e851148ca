"""A model request that fails transiently is sent again inside the trial, within a budget.

The restart test runs farm's policy server as its own process on a fixed port, SIGKILLs it
between two turns and starts it again on the same port: the trial goes on where it was.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from agent_helpers import agent_cfg, sandbox_file

from farm.agent import run_agent
from farm.agent.llm import LLMClient, retry_wait_s
from farm.config import ModelConfig
from tests.support.endpoints import free_port

TURNS = [
    {"tool_calls": [{"id": "c1", "name": "Bash", "arguments": {"command": "echo first > /app/one.txt"}}]},
    {"tool_calls": [{"id": "c2", "name": "Bash", "arguments": {"command": "cat /app/one.txt > /app/two.txt"}}]},
    {"content": "both written"},
]


def _serve(script: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "farm.agent.policies.server", "scripted",
                             "--script", str(script), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # the server prints its base URL once it listens
    assert line.strip() == f"http://127.0.0.1:{port}/v1", (line, proc.stderr.read() if proc.poll() else "")
    return proc


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return True
    return False


async def test_a_model_server_killed_and_restarted_between_turns_costs_a_wait_not_the_trial(
        sandbox, tmp_path: Path):
    script = tmp_path / "turns.json"
    script.write_text(json.dumps(TURNS))
    port = free_port()
    procs = [_serve(script, port)]
    restarted = asyncio.Event()

    async def restart_later() -> None:
        await asyncio.sleep(1.5)
        procs.append(await asyncio.to_thread(_serve, script, port))
        restarted.set()

    pending: list[asyncio.Task] = []

    async def on_step(rec) -> None:
        if rec.step == 0:  # after the first turn's tool ran, before the second model call
            os.kill(procs[0].pid, signal.SIGKILL)
            procs[0].wait(10)
            assert _refused(port)
            pending.append(asyncio.create_task(restart_later()))

    sb, task = sandbox
    llm = LLMClient(ModelConfig(name="scripted", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0,
                                request_retry_budget_s=60), session_id="s", task_id="t")
    try:
        started = time.monotonic()
        traj = await run_agent(task, sb, llm, agent_cfg(), session_id="s", on_step=on_step)
        elapsed = time.monotonic() - started
        await asyncio.gather(*pending)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(10)
        await llm.close()
    assert restarted.is_set()
    assert (traj.exit_reason, traj.final_message) == ("agent", "both written"), traj.error
    assert traj.counters.steps == 3  # one model call per turn: no turn was run again
    first, second, third = traj.steps
    assert first.request_attempts == 1 and third.request_attempts == 1
    assert second.request_attempts > 1 and 1.0 < second.request_wait_s < elapsed
    assert await sandbox_file(sb, "/app/two.txt") == b"first\n"  # the earlier turn's work was kept
    row = second.to_row("r", "k", 1)
    assert (row.request_attempts, row.request_wait_s) == (second.request_attempts, second.request_wait_s)


async def test_a_budget_spent_on_a_dead_server_ends_the_trial_naming_the_budget(sandbox):
    port = free_port()  # nothing listens there
    sb, task = sandbox
    llm = LLMClient(ModelConfig(name="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0,
                                request_retry_budget_s=1.5), session_id="s", task_id="t")
    started = time.monotonic()
    traj = await run_agent(task, sb, llm, agent_cfg(), session_id="s")
    elapsed = time.monotonic() - started
    assert traj.exit_reason == "llm_query_error"
    assert "model.request_retry_budget_s=1.5" in traj.error and "gave up after" in traj.error
    assert f"127.0.0.1:{port}" in traj.error and "Connection" in traj.error
    assert 1.5 <= elapsed < 15  # the whole budget was used: the last attempt falls at its end
    assert traj.steps[0].request_attempts > 1 and traj.steps[0].error == traj.error


async def test_transient_statuses_are_retried_and_client_errors_are_not(sandbox, policy, llm_for):
    sb, task = sandbox
    for status in (500, 503, 429):
        srv = policy([{"error": {"status": status, "times": 2}, "content": "third time"}])
        traj = await run_agent(task, sb, llm_for(srv, request_retry_budget_s=60), agent_cfg(), session_id="s")
        assert (traj.exit_reason, traj.final_message) == ("agent", "third time"), (status, traj.error)
        assert traj.steps[0].request_attempts == 3 and srv.stats()["calls"] == 3
    srv = policy([{"error": {"status": 400, "times": 1, "message": "bad request shape"}, "content": "never"}])
    started = time.monotonic()
    traj = await run_agent(task, sb, llm_for(srv, request_retry_budget_s=60), agent_cfg(), session_id="s")
    assert traj.exit_reason == "llm_query_error" and "bad request shape" in traj.error
    assert srv.stats()["calls"] == 1 and traj.steps[0].request_attempts == 1
    assert time.monotonic() - started < 5


def test_backoff_grows_with_failures_and_is_jittered():
    import random

    rng = random.Random(7)
    first = [retry_wait_s(1, rng) for _ in range(200)]
    later = [retry_wait_s(6, rng) for _ in range(200)]
    assert max(first) <= 0.5 and max(later) <= 10.0
    assert sum(later) / len(later) > 5 * sum(first) / len(first)
    assert len(set(later)) == len(later)  # jittered: trials that failed together do not retry together
