"""`farm run ... serve.enabled=true`: the run starts Ray Serve LLM + vLLM itself, points the agent
at it, and tears everything down at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from serve_helpers import free_port, marker_bias, serve_env

pytestmark = pytest.mark.integration

# Measured alone on the 2-core machine (2026-12-01): 124 s for the call (the run's own Serve +
# vLLM start, two agent turns, teardown), 248 s with the session server's start that this test
# no longer waits for. The budget allows the 2x slowdown of a loaded machine with room to spare;
# the run itself is stopped two minutes earlier (room for the cleanup check) so that a hang
# fails with the run's output, not a thread dump.
BUDGET_S = 600
RUN_TIMEOUT_S = BUDGET_S - 120


def _session_members(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == sid:  # field 6 of /proc/pid/stat: the session id
                pids.append(int(entry.name))
    return pids


@pytest.mark.timeout(BUDGET_S)
@pytest.mark.serve_stack("vllm", "ray.serve.llm")
def test_run_serves_the_model_itself_and_cleans_up(tiny_model_dir: Path, tmp_path: Path):
    # the session's tiny model files are reused; the run starts its own server, so it needs no
    # session server (one vLLM engine on the machine at a time, not two fighting for 2 cores)
    regex = (r"<think>\n[a-z ]{1,20}\n</think>\n\n<tool_call>\n<function=Bash>\n<parameter=command>\n"
             r"(ls|pwd)\n</parameter>\n</function>\n</tool_call>")
    conf = tmp_path / "run.yaml"
    conf.write_text(yaml.safe_dump({"model": {"extra_body": {
        "chat_template_kwargs": {"enable_thinking": True}, "structured_outputs": {"regex": regex},
        "logit_bias": marker_bias(tiny_model_dir)}}}))
    store = tmp_path / "results"
    cmd = [sys.executable, "-m", "farm.cli", "run", "--config", str(conf), "-q", "model=tiny-cpu",
           f"model.serving.source={tiny_model_dir}", "serve.enabled=true", f"serve.port={free_port()}",
           "agent=leaf", "agent.max_steps=2", "benchmark.task_ids=[swe-paginate-off-by-one]",
           f"store.uri={store}", "run.executor=local", "run.id=served"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=serve_env(),
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: only what this run started
        out, _ = proc.communicate(timeout=60)
        pytest.fail(f"farm run with serve.enabled=true did not finish in {RUN_TIMEOUT_S}s:\n{out[-4000:]}")
    assert proc.returncode == 0, out[-4000:]

    from farm.store.results import ResultStore

    (row,) = ResultStore.open(str(store)).read_trials("served").to_pylist()
    assert row["status"] == "unresolved" and row["exit_reason"] == "max_turns" and row["tool_calls"] == 2
    assert row["model"] == "tiny-cpu" and row["reasoning_field"] == "reasoning"
    # nothing the run started (Ray head, Serve replicas, vLLM engine) outlives it
    deadline = time.time() + 60
    while _session_members(proc.pid) and time.time() < deadline:
        time.sleep(1)
    left = _session_members(proc.pid)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
    assert left == []
