"""`farm run > file`: progress lines while it runs (a stalled start named with its step), and a
SIGTERM that stops the sandboxes the run started before the process exits (farm/cli.py,
farm/run/progress.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.tasks import CHECK_ANSWER, make_task_dir, make_task_files

FARM = [sys.executable, "-m", "farm.cli", "run"]
EXIT_TERM = 143


def _wait_for(log: Path, proc: subprocess.Popen, done: Callable[[list[str]], bool], timeout: float = 120) -> list[str]:
    """The progress lines of ``log`` once ``done`` holds for them (fails if the run ended first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [ln for ln in log.read_text().splitlines() if ln.startswith("progress +")]
        if done(lines):
            return lines
        assert proc.poll() is None, f"farm run ended ({proc.returncode}) first:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no such progress line in {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def _terminate(proc: subprocess.Popen, err: Path) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError("farm run did not exit after SIGTERM") from None
    text = err.read_text()
    assert proc.returncode == EXIT_TERM, text[-3000:]
    assert "stopped by SIGTERM" in text
    return text


def _running_under(path: Path) -> list[str]:
    """Command lines of processes that name ``path`` (only this test's run uses that directory)."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(path) in cmd:
                out.append(cmd)
    return out


@pytest.mark.bwrap
def test_a_run_to_a_file_says_where_it_is_and_sigterm_leaves_no_sandbox(tmp_path: Path) -> None:
    """Two trials at once: one whose start hangs in a build step, one whose agent runs long.
    The log names both, with the step the start hangs in, again at each interval; SIGTERM then
    closes both sandboxes (no process, no sandbox directory left) and exits 143."""
    tasks = tmp_path / "tasks"
    stalled = make_task_dir(tasks, "stalled-start", CHECK_ANSWER)
    with (stalled / "environment" / "Dockerfile").open("a") as f:
        f.write("RUN sleep 600\n")
    make_task_dir(tasks, "long-agent", CHECK_ANSWER, solve_sh="sleep 600\n")
    sandboxes, log, err = tmp_path / "sandboxes", tmp_path / "run.log", tmp_path / "run.err"
    args = [f"benchmark.path={tasks}", "agent=oracle", "run.executor=local", "run.preflight=false",
            f"store.uri={tmp_path / 'store'}", f"sandbox.local.root_dir={sandboxes}", "run.max_in_flight=2",
            "run.max_attempts=1", "run.progress_interval_s=0.3"]
    with log.open("w") as out, err.open("w") as errs:
        proc = subprocess.Popen(FARM + args, stdout=out, stderr=errs, start_new_session=True)
    try:
        def both_stuck(lines: list[str]) -> list[str]:
            return [ln for ln in lines if "start 1: stalled-start" in ln and "agent 1: long-agent" in ln]

        # nothing changes while both are stuck: a line again and again is the interval's
        lines = _wait_for(log, proc, lambda lines: len(both_stuck(lines)) >= 3)
        line = both_stuck(lines)[-1]
        assert "in build step 3: RUN sleep 600" in line, line
        assert "0/2 done" in line
        assert _running_under(sandboxes), "the sandboxes should be running now"
        _terminate(proc, err)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # bwrap dies with its parent anyway; what only a closed sandbox leaves behind is nothing at all
    assert _running_under(sandboxes) == []
    assert sorted(p.name for p in sandboxes.iterdir()) == [], "a sandbox's directory was left behind"


@pytest.mark.integration
def test_sigterm_stops_the_podman_container_of_a_trial_in_flight(tmp_path: Path, podman_env: dict[str, str]) -> None:
    """sandbox=docker on podman: a container is `run -d`, nobody's child; SIGTERM mid-trial must
    remove it (and its volume) before farm exits."""
    from farm.sandbox.relayed.manifests import RUN_LABEL
    from tests.support.podman import BASE_IMAGE, TOOLBOX_IMAGE, podman

    toml = ('[agent]\ntimeout_sec = 600\n[verifier]\ntimeout_sec = 30\n'
            f'[environment]\ndocker_image = "{BASE_IMAGE}"\n')
    make_task_files(tmp_path / "tasks", "long-agent", toml, files={"solution/solve.sh": "sleep 600\n"})
    run_id = f"sigterm-{uuid.uuid4().hex[:8]}"
    log, err = tmp_path / "run.log", tmp_path / "run.err"
    args = [f"benchmark.path={tmp_path / 'tasks'}", "agent=oracle", "run.executor=local", "run.preflight=false",
            f"store.uri={tmp_path / 'store'}", f"run.id={run_id}", "run.max_attempts=1",
            "run.progress_interval_s=0.3", "sandbox=docker", "sandbox.docker.engine=podman",
            f"sandbox.docker.toolbox_image={TOOLBOX_IMAGE}", "sandbox.docker.pull=never"]

    def ours(kind: str) -> list[str]:
        how = ["ls"] if kind == "volume" else ["-a"]
        return podman(kind, *how, "-q", "--filter", f"label={RUN_LABEL}={run_id}").stdout.split()

    with log.open("w") as out, err.open("w") as errs:
        proc = subprocess.Popen(FARM + args, stdout=out, stderr=errs, start_new_session=True, env=podman_env)
    try:
        _wait_for(log, proc, lambda lines: any("agent 1: long-agent" in ln for ln in lines))
        assert ours("ps"), "the trial's container should be running now"
        _terminate(proc, err)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        left = ours("ps")
        for name in left:  # never leave one behind for the next test, even when this one fails
            podman("rm", "-f", "-t", "0", name)
    assert left == [], "a container of the run was left behind"
    assert ours("volume") == []
