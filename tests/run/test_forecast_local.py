"""`farm plan` predicts a real local run from a pilot of a tenth of its trials.

Both runs are `farm run` processes of their own, as a user runs them (each pays its own start
and its own first-wave warm-up), against the scripted endpoint with a fixed latency per turn,
in real bubblewrap sandboxes. The pilot is 2 trials (a tenth) run one at a time: two waves, so
the first wave's warm-up can be told from trial time. The forecast is for 20 trials at
max_in_flight 2 (10 waves), and that run is then made. The fixed latency (2 turns of 2 s)
outweighs the CPU-bound parts of a trial (sandbox start, grading: about 1 s), which keeps the
load of other work on this shared machine, and the pilot's lower CPU contention, from deciding
the outcome.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from farm.forecast.model import forecast, load_plan_spec
from farm.forecast.pilot import load_pilot
from farm.store import ResultStore

pytestmark = [pytest.mark.slow, pytest.mark.bwrap]

LATENCY_S = 2.0


def make_task(root: Path) -> Path:
    d = root / "trivial"
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "task.toml").write_text('[agent]\ntimeout_sec = 600\nnetwork_mode = "no-network"\n'
                                 '[verifier]\ntimeout_sec = 60\nnetwork_mode = "no-network"\n')
    (d / "instruction.md").write_text("Nothing to do.\n")
    (d / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (d / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return root


def farm_run(tmp: Path, tasks: Path, script: Path, seeds: int, max_in_flight: int, run_id: str) -> float:
    args = [f"benchmark.path={tasks}", "agent=scripted", f"agent.script={script}", f"run.seeds={seeds}",
            f"run.max_in_flight={max_in_flight}", "run.executor=local", "run.max_attempts=1",
            f"store.uri={tmp / 'store'}", "sandbox.local.limits=false", f"sandbox.local.root_dir={tmp / 'sb'}",
            "run.progress=false", "run.preflight=false", f"run.id={run_id}"]
    out = subprocess.run([sys.executable, "-m", "farm.cli", "run", "-q", *args], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.search(r"attempts now \(\d+ retries\) in ([0-9.]+)s", out.stdout)
    assert m, out.stdout
    return float(m.group(1))


def test_a_pilot_of_a_tenth_predicts_the_runs_wall_time(tmp_path):
    tasks = make_task(tmp_path / "tasks")
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump([
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}], "delay_s": LATENCY_S},
        {"content": "done", "delay_s": LATENCY_S},
    ]))
    farm_run(tmp_path, tasks, script, 2, 1, "pilot")
    pilot = load_pilot(ResultStore.open(str(tmp_path / "store")), "pilot")
    assert not pilot.notes  # two waves: the warm-up was measured
    fc = forecast(load_plan_spec(None, ["run.seeds=20", "run.max_in_flight=2", "sensitivity.enabled=false"]), pilot)
    assert fc.base.trials == 20
    predicted = fc.base.wall_h * 3600
    actual = farm_run(tmp_path, tasks, script, 20, 2, "full")
    print(f"farm plan: predicted {predicted:.1f} s, the run took {actual:.1f} s ({predicted / actual - 1:+.0%})")
    assert abs(predicted / actual - 1) <= 0.20, f"predicted {predicted:.1f} s, the run took {actual:.1f} s"
