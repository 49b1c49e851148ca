"""The whole SWE-bench path on an instance this test makes (issue 26 item 7): a SWE-bench-format
row for a small Python package with a bug (its issue text, gold patch, test patch,
FAIL_TO_PASS/PASS_TO_PASS, and — the swebench package has no specs for a repository of our own —
its spec in the package's shape via the row's ``spec``/``log_parser_of`` fields), the repository
in a mirror the test creates, the instance image built by farm's SWE-bench builder from the
package's own scripts under podman (Debian's python3.11: no CPython prefix is given), and
``farm run`` grading it by the package's evaluation script and log parser: the gold patch
resolves, the empty patch does not."""

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


def _run(agent: str, rows: Path, mirror: Path, tmp: Path, env: dict) -> dict:
    store = tmp / f"store-{agent}"
    cmd = [sys.executable, "-m", "farm.cli", "run", "-q", f"agent={agent}", *benchmark_overrides(rows, mirror, tmp),
           "sandbox=docker", "sandbox.docker.engine=podman",
           "sandbox.image_policy=build", "sandbox.docker.pull=never", f"store.uri={store}", "run.executor=local"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=2400, cwd=REPO)
    rows_out = pq.read_table(store / "trials").to_pylist() if (store / "trials").exists() else []
    assert res.returncode == 0 and len(rows_out) == 1, (res.returncode, res.stderr[-3000:], rows_out)
    row = rows_out[0]
    verifier = next((store / "artifacts").rglob("verifier.txt")).read_text()
    return {"row": row, "verifier": verifier}


@pytest.mark.timeout(3000)
def test_gold_resolves_and_empty_does_not_on_a_made_instance(tmp_path: Path):
    env = ensure_standins("python:3.11-slim")  # the Debian bookworm root the SWE-bench base starts from
    row, mirror = make_instance(tmp_path)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")

    # `farm images build` builds the instance stand-in (and the task image on it) ahead of the run
    build = subprocess.run([sys.executable, "-m", "farm.cli", "images", "build",
                            *benchmark_overrides(rows, mirror, tmp_path), "sandbox.docker.engine=podman",
                            "sandbox.docker.pull=never"],
                           capture_output=True, text=True, env=env, timeout=2400, cwd=REPO)
    assert build.returncode == 0, (build.stdout[-2000:], build.stderr[-2000:])
    label = subprocess.run(["podman", "image", "inspect", "--format", '{{index .Labels "io.farm.standin"}}',
                            "docker.io/swebench/sweb.eval.x86_64.farmtest_1776_calc-1:latest"],
                           capture_output=True, text=True, env=env)
    assert label.stdout.strip() == "true", label

    gold = _run("oracle", rows, mirror, tmp_path, env)
    r = gold["row"]
    assert r["status"] == "resolved", (r["status"], r["error_class"], r["error"], gold["verifier"][-2000:])
    assert r["task_id"] == INSTANCE_ID and r["benchmark"] == "swebench_verified"
    assert r["base_image_standin"] is True  # the instance image is labelled a stand-in, and the row says so
    assert "[farm swebench] RESOLVED_FULL" in gold["verifier"]
    assert "FAIL_TO_PASS 1 passed / 0 failed" in gold["verifier"]

    empty = _run("nop", rows, mirror, tmp_path, env)
    r = empty["row"]
    assert r["status"] == "unresolved", (r["status"], r["error_class"], r["error"], empty["verifier"][-2000:])
    assert "[farm swebench] RESOLVED_NO" in empty["verifier"]
    assert "FAIL_TO_PASS 0 passed / 1 failed" in empty["verifier"]
