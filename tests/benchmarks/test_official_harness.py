"""bench/official_harness.py end to end on the instance the suite makes (issue 37 item 3): farm
and the ``swebench`` package's own ``run_evaluation`` grade the same prediction on the same
stand-in image, the harness through a podman API service the script starts on a socket of its
own; both verdicts are set side by side, and nothing is left running.

The instance image is the one tests/benchmarks/test_swebench_path.py builds (same base commit,
same recipe: reused when present). The full sweep over the published submissions is
``make official-sweep`` (docs/benchmarks.md), not CI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.swebench_instance import INSTANCE_ID, make_instance

from .standin import REPO, ensure_standins

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.tools("git")]


@pytest.mark.timeout(3000)
def test_farm_and_the_official_harness_agree_on_a_made_instance_side_by_side(tmp_path: Path):
    env = ensure_standins("python:3.11-slim")
    row, mirror = make_instance(tmp_path)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    (tmp_path / "no-pythons").mkdir()
    # a submission in the leaderboard's layout: its patches and, beside them, its published results
    submission = tmp_path / "20990101_made-system"
    submission.mkdir()
    (submission / "preds.jsonl").write_text(json.dumps({"instance_id": INSTANCE_ID, "model_name_or_path": "made",
                                                        "model_patch": row["patch"]}) + "\n")
    (submission / "results.json").write_text(json.dumps({"resolved": [], "no_logs": []}))
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(REPO / "bench" / "official_harness.py"), str(submission / "preds.jsonl"),
                          "--rows", str(rows), "--repos", str(mirror), "--pythons", str(tmp_path / "no-pythons"),
                          "--out", str(out), "--json"], capture_output=True, text=True, env=env, timeout=2400,
                         cwd=tmp_path)
    assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-3000:])
    result = json.loads(res.stdout[res.stdout.index("\n{") + 1:])
    assert result["instances"] == [INSTANCE_ID] and result["compared"] == result["agreed"] == 1
    side = result["sources"]["20990101_made-system"]
    (pair,) = side["pairs"]
    assert (pair["farm"], pair["official"], pair["official_reason"]) == ("resolved", "resolved", "resolved_ids")
    assert result["farm_wall_s"] > 0 and result["harness_wall_s"] > 0
    assert f"{INSTANCE_ID:<48} resolved     resolved     yes" in res.stdout
    # the published results (made here to say unresolved) are set beside farm's too: a disagreement
    # with the leaderboard is reported, not a failure of the sweep
    assert side["published"]["compared"] == 1 and side["published"]["disagreements"] == [INSTANCE_ID]

    # the harness really ran the instance: its own per-instance report and test log, on the image
    # farm's builder made (the package's namespace naming), through the script's own socket
    harness = out / "20990101_made-system" / "harness"
    report = json.loads(next(harness.rglob(f"{INSTANCE_ID}/report.json")).read_text())
    assert report[INSTANCE_ID]["resolved"] is True
    assert "PASSED tests/test_calc.py::test_add" in next(harness.rglob(f"{INSTANCE_ID}/test_output.txt")).read_text()
    assert not (harness / "podman.sock").exists()  # the service was stopped (it removes its socket)
    left = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True,
                          env=env).stdout
    assert "farm-beside" not in left  # the harness names its containers sweb.eval.<id>.<run id>
