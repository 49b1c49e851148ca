"""`farm grade` on the SWE-bench instance the suite makes (tests/support/swebench_instance.py),
under podman, through the package's evaluation script: a prediction holding the gold patch
resolves, one that applies nowhere is unresolved (prediction_not_applied) without running the
tests, and the rows name the file's model. Reuses the made instance's image (built by
tests/benchmarks/test_swebench_path.py, or here once)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.swebench_instance import INSTANCE_ID, benchmark_overrides, make_instance

from .standin import REPO, ensure_standins

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.tools("git")]


def _grade(patch: str, name: str, rows: Path, mirror: Path, tmp: Path, env: dict) -> dict:
    preds = tmp / f"{name}.jsonl"
    preds.write_text(json.dumps({"instance_id": INSTANCE_ID, "model_name_or_path": f"model-{name}",
                                 "model_patch": patch}) + "\n")
    store = tmp / f"store-{name}"
    cmd = [sys.executable, "-m", "farm.cli", "grade", str(preds), "-q", *benchmark_overrides(rows, mirror, tmp),
           "sandbox=docker", "sandbox.docker.engine=podman", "sandbox.image_policy=build",
           "sandbox.docker.pull=never", f"store.uri={store}", "run.executor=local"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=2400, cwd=REPO)
    out = pq.read_table(store / "trials").to_pylist() if (store / "trials").exists() else []
    assert res.returncode == 0 and len(out) == 1, (res.returncode, res.stderr[-3000:], out)
    return out[0]


@pytest.mark.timeout(3000)
def test_predictions_are_graded_on_a_made_instance(tmp_path: Path) -> None:
    env = ensure_standins("python:3.11-slim")
    row, mirror = make_instance(tmp_path)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")

    gold = _grade(row["patch"], "gold", rows, mirror, tmp_path, env)
    assert (gold["status"], gold["policy"], gold["model"]) == ("resolved", "predictions", "model-gold"), gold["error"]
    assert gold["benchmark"] == "swebench_verified" and gold["tool_calls"] == 1

    broken = "--- a/nowhere.py\n+++ b/nowhere.py\n@@ -1 +1 @@\n-x\n+y\n"
    nowhere = _grade(broken, "nowhere", rows, mirror, tmp_path, env)
    assert (nowhere["status"], nowhere["error_class"]) == ("unresolved", "prediction_not_applied")
    assert not nowhere["verifier_runs"]  # the tests never ran, as in the harness
