"""`farm run experiment=demo` then `farm report`: two arms on the bundled suite, through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.cli import main
from farm.store import ResultStore


@pytest.mark.integration
def test_demo_experiment_and_report(tmp_path: Path, capsys):
    store = tmp_path / "store"
    assert main(["run", "-q", "experiment=demo", "run.executor=local", f"store.uri={store}", "run.seeds=1",
                 "run.max_in_flight=6"]) == 0
    (run_id,) = ResultStore.open(str(store)).list_runs()
    rows = ResultStore.open(str(store)).read_trials(run_id).to_pylist()
    by_arm: dict[str, list[str]] = {}
    for r in rows:
        by_arm.setdefault(r["arm"], []).append(r["status"])
    assert set(by_arm) == {"oracle", "partial"}
    assert set(by_arm["oracle"]) == {"resolved"}
    assert "unresolved" in by_arm["partial"] and "resolved" in by_arm["partial"]
    partial = [r for r in rows if r["arm"] == "partial" and r["status"] == "resolved"]
    assert all(r["parallel_call_turns"] == 1 for r in partial)  # the three-Glob survey turn
    out = tmp_path / "report"
    assert main(["report", run_id, "--store", str(store), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "Ablation" in md and "McNemar" in md and run_id in md
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 3
    assert (out / "ablation.csv").read_text().count(run_id) == 2
