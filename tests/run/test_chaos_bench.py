"""bench/chaos.py at a few dozen trials: through two lost Ray nodes, a 503 storm on the store,
a restarted model server and a burst of failed starts, every trial lands exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 24


def test_the_chaos_benchmark_lands_every_trial_exactly_once(tmp_path: Path) -> None:
    # nothing of CI's FARM_* settings or a cluster address: the benchmark starts its own cluster
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "RAY_ADDRESS", "AWS_"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "chaos.py"), "--trials", str(TRIALS),
                           "--store", "s3", "--burst-starts", "4", "--json-out", str(tmp_path / "chaos.json")],
                          capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    # the file, not stdout's last line: Ray printed its log-dedup notice after the JSON line in CI
    assert (tmp_path / "chaos.json").is_file(), (done.stdout[-2000:], done.stderr[-3000:])
    out = json.loads((tmp_path / "chaos.json").read_text())
    assert (out["trials"], out["rows"], out["duplicates"], out["lost"]) == (TRIALS, TRIALS, 0, 0), out
    assert done.returncode == 0, out
    # the faults really happened, and cost attempts that the ledger accounts for
    faults = out["faults"]
    assert faults["node_lost"] == 2 and faults["endpoint_restart"] == 1, out
    assert faults["store_503"] > 0 and faults["failed_starts"] == 4, out
    # the refused starts cost attempts; whether a killed node held a running trial at that moment
    # is timing (24 trials over ~10 s: runs here gave 0 and more), so worker_lost is not asserted;
    # tests/run/test_ray_node_loss.py pins a trial on a node it kills, and `make chaos` runs 2,000
    assert out["faults_injected"] == 5 and out["attempts_per_trial"] > 1, out
    assert out["unledgered"] == 0, out
