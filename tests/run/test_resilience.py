"""Nothing lost, nothing duplicated: SIGKILLed drivers, sandboxes killed from outside, and an
endpoint that fails for a while."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from farm.config import load_config
from farm.run.driver import run_experiment
from farm.store import ResultStore
from tests.support.endpoints import free_port
from tests.support.tasks import CHECK_ANSWER
from tests.support.tasks import make_task_dir as make_task

HERE = Path(__file__).resolve().parent
FARM = [sys.executable, "-m", "farm.cli"]
SOLVE_TURNS = [
    {"tool_calls": [{"name": "Bash", "arguments": {"command": "sleep 0.3; echo fixed > /app/answer.txt"}}],
     "delay_s": 0.2},
    {"content": "done", "delay_s": 0.1},
]


def _wait_port(port: int, timeout: float = 30) -> None:
    import socket

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} did not open")


@pytest.fixture
def counting_endpoint(tmp_path: Path):
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(SOLVE_TURNS))
    port, log = free_port(), tmp_path / "calls.log"
    proc = subprocess.Popen([sys.executable, str(HERE / "counting_policy.py"), str(script), str(port), str(log)])
    _wait_port(port)
    yield f"http://127.0.0.1:{port}/v1", log
    proc.terminate()
    proc.wait(10)


def _calls(log: Path) -> list[tuple[float, str]]:
    out = []
    for line in log.read_text().splitlines():
        ts, session = line.split()
        out.append((float(ts), session))
    return out


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["local", "s3"])
def test_sigkilled_driver_loses_and_duplicates_nothing(backend, counting_endpoint, tmp_path, request):
    base_url, log = counting_endpoint
    tasks = tmp_path / "tasks"
    for i in range(12):
        make_task(tasks, f"t{i:02d}", CHECK_ANSWER, solve_sh=None)
    if backend == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        uri = f"s3://{request.getfixturevalue('s3_bucket')}/crash"
        store_args = [f"store.uri={uri}", f"store.endpoint_url={endpoint}"]
    else:
        uri, endpoint = str(tmp_path / "store"), None
        store_args = [f"store.uri={uri}"]
    # model.name: the id the endpoint serves (the preflight refuses a run that asks for another)
    args = ["run", "--quiet", f"benchmark.path={tasks}", "agent=leaf", f"model.base_url={base_url}",
            "model.name=scripted",
            "run.seeds=4", "run.executor=local", "run.max_in_flight=6", "run.id=crash",
            "store.batch_rows=4", "store.flush_interval_s=0.5", *store_args]
    store = ResultStore.open(uri, endpoint)
    rng = random.Random(1234)
    kills: list[tuple[float, set[str]]] = []
    for _ in range(3):
        before = store.read_trials("crash").num_rows if store.read_run_meta("crash") else 0
        proc = subprocess.Popen(FARM + args, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        # kill at a random moment after this invocation committed a random number of trials
        want, deadline = before + rng.randint(1, 8), time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if store.read_run_meta("crash") and store.read_trials("crash").num_rows >= want:
                break
            time.sleep(0.2)
        time.sleep(rng.uniform(0.0, 1.5))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_at = time.time()
        # finished trials only: a trial whose latest row is an attempt_lost (written by a resume
        # before this kill) is unfinished and is rightly run again
        committed = {r["trial_key"] for r in store.read_trials("crash").to_pylist() if r["status"] == "resolved"}
        kills.append((killed_at, committed))
    final = subprocess.run(FARM + args, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]

    rows = store.read_trials("crash", dedupe=False).to_pylist()
    # attempts whose agents were running at a kill have no row of their own: resume recorded
    # each as infra_error/attempt_lost before drawing the trial again (never a silent re-draw)
    lost = [r for r in rows if r["error_class"] == "attempt_lost"]
    graded = [r for r in rows if r["error_class"] != "attempt_lost"]
    keys = [r["trial_key"] for r in graded]
    assert len(graded) == 48 and len(set(keys)) == 48  # exactly one graded row per trial
    assert {r["status"] for r in graded} == {"resolved"}
    assert {r["status"] for r in lost} <= {"infra_error"}
    attempt_of = {r["trial_key"]: r["attempt"] for r in graded}
    assert all(attempt_of[r["trial_key"]] > r["attempt"] for r in lost)  # re-drawn under a new attempt
    # the ledger: every admitted attempt has exactly one row, and every row was admitted
    ledger = [(r["trial_key"], r["attempt"]) for r in rows]
    assert len(ledger) == len(set(ledger)) and set(ledger) == store.read_admitted("crash")
    assert len(rows) == 48 + len(lost)
    plan = {r["trial_key"] for r in store.read_plan("crash").to_pylist()}
    assert plan == set(keys)
    assert any(committed for _, committed in kills), "no trial was committed before any kill"
    calls = _calls(log)
    for killed_at, committed in kills:
        late = [s for ts, s in calls if ts > killed_at and s in committed]
        assert late == [], f"trials committed before a kill were run again: {sorted(set(late))[:5]}"
    # and every finished trial talked to the policy exactly once per scripted turn in its last run
    assert {s for _, s in calls} >= set(keys)


def test_endpoint_failures_are_retried_infra_errors(tmp_path: Path):
    tasks = tmp_path / "tasks"
    make_task(tasks, "only", CHECK_ANSWER, solve_sh=None)
    script = tmp_path / "flaky.yaml"
    first = dict(SOLVE_TURNS[0], error={"status": 500, "times": 2})
    script.write_text(yaml.safe_dump([first, SOLVE_TURNS[1]]))
    cfg = load_config([f"benchmark.path={tasks}", "agent=scripted", f"agent.script={script}",
                       "run.executor=local", f"store.uri={tmp_path / 'store'}", "model.max_retries=0",
                       "model.request_retry_budget_s=0", "run.max_attempts=4", "run.retry_backoff_s=0"])
    summary = asyncio.run(run_experiment(cfg))
    rows = sorted(ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id, dedupe=False).to_pylist(),
                  key=lambda r: r["attempt"])
    assert [(r["status"], r["error_class"]) for r in rows] == [
        ("infra_error", "llm_query_error"), ("infra_error", "llm_query_error"), ("resolved", None)]
    assert "no retry budget (model.request_retry_budget_s=0)" in rows[0]["error"]


def test_endpoint_failures_within_the_request_budget_are_retried_inside_the_trial(tmp_path: Path):
    tasks = tmp_path / "tasks"
    make_task(tasks, "only", CHECK_ANSWER, solve_sh=None)
    script = tmp_path / "flaky.yaml"
    script.write_text(yaml.safe_dump([SOLVE_TURNS[0], dict(SOLVE_TURNS[1], error={"status": 503, "times": 2})]))
    cfg = load_config([f"benchmark.path={tasks}", "agent=scripted", f"agent.script={script}",
                       "run.executor=local", f"store.uri={tmp_path / 'store'}", "model.max_retries=0",
                       "model.request_retry_budget_s=60", "run.max_attempts=4", "run.retry_backoff_s=0"])
    summary = asyncio.run(run_experiment(cfg))
    store = ResultStore.open(str(tmp_path / "store"))
    rows = store.read_trials(summary.run_id, dedupe=False).to_pylist()
    assert [(r["status"], r["attempt"], r["steps"]) for r in rows] == [("resolved", 1, 2)]  # no second agent run
    steps = sorted(store.read_steps(summary.run_id).to_pylist(), key=lambda s: s["step"])
    assert [s["request_attempts"] for s in steps] == [1, 3]
    assert steps[1]["request_wait_s"] > 0 and all(s["ttft_s"] is not None for s in steps)  # streamed
    assert rows[0]["queue_s_total"] is None  # the policy reported no queue time
    assert abs(rows[0]["generation_s_total"] - rows[0]["llm_s"]) < 1e-6


def test_endpoint_failures_past_the_request_budget_are_infra_errors_naming_it(tmp_path: Path):
    tasks = tmp_path / "tasks"
    make_task(tasks, "only", CHECK_ANSWER, solve_sh=None)
    script = tmp_path / "dead.yaml"
    script.write_text(yaml.safe_dump([SOLVE_TURNS[0], dict(SOLVE_TURNS[1], error={"status": 502, "times": 10_000})]))
    cfg = load_config([f"benchmark.path={tasks}", "agent=scripted", f"agent.script={script}",
                       "run.executor=local", f"store.uri={tmp_path / 'store'}", "model.max_retries=0",
                       "model.request_retry_budget_s=1", "run.max_attempts=1"])
    summary = asyncio.run(run_experiment(cfg))
    rows = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id, dedupe=False).to_pylist()
    assert [(r["status"], r["error_class"]) for r in rows] == [("infra_error", "llm_query_error")]
    assert "502" in rows[0]["error"] and "model.request_retry_budget_s=1)" in rows[0]["error"]
    assert "gave up after" in rows[0]["error"]


def _bwrap_pids(root: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"bwrap") and any(str(root).encode() in c for c in cmd):
            pids.append(int(entry.name))
    return pids


def test_sandbox_killed_from_outside_is_a_retried_infra_error(tmp_path: Path):
    tasks = tmp_path / "tasks"
    make_task(tasks, "only", CHECK_ANSWER, solve_sh=None)
    script = tmp_path / "slow.yaml"
    slow = {"tool_calls": [{"name": "Bash", "arguments": {"command": "sleep 4; echo fixed > /app/answer.txt"}}]}
    script.write_text(yaml.safe_dump([slow, {"content": "done"}]))
    root = tmp_path / "sandboxes"
    cfg = load_config([f"benchmark.path={tasks}", "agent=scripted", f"agent.script={script}",
                       "run.executor=local", f"store.uri={tmp_path / 'store'}", f"sandbox.local.root_dir={root}",
                       "run.max_attempts=3", "run.retry_backoff_s=0",
                       # the preflight sandbox lives through the same bwrap scan: under load it was
                       # the one killed (a PreflightError), not the trial's
                       "run.preflight_sandbox=false"])

    async def main():
        run = asyncio.create_task(run_experiment(cfg))
        killed = False
        while not run.done():
            await asyncio.sleep(0.2)
            pids = _bwrap_pids(root)
            if pids and not killed:
                await asyncio.sleep(1.0)  # inside the agent's sleep 4
                for pid in _bwrap_pids(root):
                    os.kill(pid, signal.SIGKILL)
                killed = True
        return killed, await run

    killed, summary = asyncio.run(main())
    assert killed
    rows = sorted(ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id, dedupe=False).to_pylist(),
                  key=lambda r: r["attempt"])
    assert rows[0]["status"] == "infra_error"
    assert rows[-1]["status"] == "resolved" and len(rows) == 2
