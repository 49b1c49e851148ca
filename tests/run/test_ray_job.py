"""`ray job submit` against a real local Ray head (dashboard on loopback), reading the Parquet."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from farm.store import ResultStore
from tests.support.endpoints import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    bindir = Path(sys.executable).parent
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="disabled",
               PATH=f"{bindir}:{os.environ['PATH']}")
    dash = free_port()
    cmd = [str(bindir / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
           f"--port={free_port()}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
           "--include-dashboard=true", "--num-cpus=2", f"--ray-client-server-port={free_port()}",
           f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}",
           f"--temp-dir={tmp_path_factory.mktemp('ray')}"]
    log = open(tmp_path_factory.mktemp("raylog") / "head.log", "w")
    # a new session: the head and everything it spawns share one process group we can stop
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{address}/api/version", timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"ray head exited: {Path(log.name).read_text()[-2000:]}")
            time.sleep(1)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("ray dashboard did not come up")
    yield address, env
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    try:  # anything left in the group (workers) goes too
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_ray_job_submit_runs_an_evaluation(ray_head, task_dir: Path, tmp_path: Path):
    address, env = ray_head
    store = tmp_path / "store"
    cmd = [str(Path(sys.executable).parent / "ray"), "job", "submit", "--address", address,
           "--working-dir", str(REPO), "--runtime-env", str(REPO / "jobs/runtime_env.yaml"), "--",
           "python", "jobs/eval.py", "agent=oracle", f"benchmark.path={task_dir}", f"store.uri={store}",
           "run.workers=1", "run.max_attempts=1", "run.id=job-test"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    # no-reward stays infra_error after its one attempt, so the job fails with farm run's exit
    # code 4: a scheduler sees an incomplete evaluation as a failed job, not a success
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "exit code 4" in out, out[-3000:]
    assert "incomplete: 1 trials still infra_error" in out
    rows = {r["task_id"]: r for r in ResultStore.open(str(store)).read_trials("job-test").to_pylist()}
    assert rows["write-answer"]["status"] == "resolved"
    assert rows["no-reward"]["status"] == "infra_error"
    # the trials ran in a Ray worker process, not in the job's driver
    assert rows["write-answer"]["worker"].split(":")[1] != str(os.getpid())
