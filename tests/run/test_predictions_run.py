"""A predictions file graded as a run, the whole way (`farm grade`): bubblewrap sandboxes of the
built-in git tasks, the predictions policy over HTTP, the Leaf loop's Bash tool applying each
patch as the SWE-bench harness does, the tasks' verifiers, the store, resume, the report's
missing-prediction count and `farm report --official`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.cli import main
from farm.store import ResultStore
from farm.tasks.benchmark import builtin_tasks

pytestmark = [pytest.mark.bwrap, pytest.mark.tools("git", "patch")]

TASK = "swe-paginate-off-by-one"
SOLUTION = Path(__file__).parents[2] / "farm" / "tasks" / "builtin" / TASK / "solution" / "solve.sh"


def _fix() -> str:
    """The reference fix of TASK as a patch (its solve.sh pipes it to git apply)."""
    return SOLUTION.read_text().split("<<'PATCH'\n", 1)[1].split("\nPATCH", 1)[0] + "\n"


def test_a_predictions_file_is_graded_as_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    preds = {
        TASK: _fix(),
        "swe-utc-day-boundary": "",  # the model gave no patch
        "swe-memoize-cache-key": "--- a/nowhere.py\n+++ b/nowhere.py\n@@ -1 +1 @@\n-a\n+b\n",  # applies nowhere
    }
    file = tmp_path / "preds.json"  # a JSON object keyed by instance id
    file.write_text(json.dumps({k: {"model_name_or_path": "sub-1", "model_patch": v} for k, v in preds.items()}))
    uri = str(tmp_path / "store")
    args = ["grade", str(file), "benchmark=builtin", "run.executor=local", f"store.uri={uri}", "run.id=p", "-q"]
    assert main(args) == 0
    store = ResultStore.open(uri)
    rows = {r["task_id"]: r for r in store.read_trials("p").to_pylist()}
    assert set(rows) == set(preds)  # only the file's instances run
    for r in rows.values():
        assert (r["policy"], r["model"], r["endpoint_origin"]) == ("predictions", "sub-1", "farm-policy")
        assert r["agent_script_sha256"] and len(r["agent_script_sha256"]) == 64
    fixed, empty, nowhere = rows[TASK], rows["swe-utc-day-boundary"], rows["swe-memoize-cache-key"]
    assert (fixed["status"], fixed["error_class"], fixed["tool_calls"]) == ("resolved", None, 1)
    # an empty patch is not run at all, as in the harness: no sandbox, no agent
    assert (empty["status"], empty["error_class"], empty["tool_calls"]) == ("unresolved", "prediction_empty", None)
    assert (nowhere["status"], nowhere["error_class"]) == ("unresolved", "prediction_not_applied")
    assert "did not apply" in nowhere["error"] and "nowhere.py" in nowhere["error"]
    applied = store.read_artifact("p", fixed["trial_key"], 1, "prediction-apply.txt").decode()
    assert applied.startswith("applied with: git apply --verbose")
    assert store.read_artifact("p", fixed["trial_key"], 1, "prediction.diff") == preds[TASK].encode()
    assert b"-(-hits // self.per_page)" in store.read_artifact("p", fixed["trial_key"], 1, "patch.diff")
    steps = store.read_steps("p").to_pylist()
    per_trial = {k: sum(1 for s in steps if s["trial_key"] == k) for k in (fixed["trial_key"], nowhere["trial_key"])}
    assert per_trial == {fixed["trial_key"]: 2, nowhere["trial_key"]: 2}  # one Bash call, one answer each
    assert not any(s["trial_key"] == empty["trial_key"] for s in steps)
    meta = store.read_run_meta("p")["predictions"]
    missing = len(builtin_tasks()) - 3
    assert (meta["predictions"], meta["run"], meta["empty"], meta["missing"]) == (3, 3, 1, missing)
    out = " ".join(capsys.readouterr().out.split())  # the tables wrap their cells
    assert "builtin sub-1" in out and "(predictions)" in out and f"Missing predictions: {missing} of the" in out

    assert main(args) == 0  # resume: every trial has its final row
    assert len(store.read_trials("p", dedupe=False)) == 3

    results = tmp_path / "results.json"  # the harness resolved the fix, and (say) the unappliable one
    results.write_text(json.dumps({"resolved": [TASK, "swe-memoize-cache-key"], "no_generation":
                                   ["swe-utc-day-boundary"], "no_logs": []}))
    capsys.readouterr()
    assert main(["report", "p", f"store.uri={uri}", "--official", str(results), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "agree on 2 of 3 compared" in out
    assert "swe-memoize-cache-key (seed 0): farm unresolved [prediction_not_applied], official resolved" in out
    data = json.loads((tmp_path / "rep" / "official-agreement.json").read_text())
    assert data["disagreements"] == ["swe-memoize-cache-key"]


def test_farm_grade_refuses_a_bad_file_before_loading_anything(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "preds.jsonl"
    bad.write_text('{"model_name_or_path": "m", "model_patch": ""}\n')
    assert main(["grade", str(bad), f"store.uri={tmp_path / 's'}"]) == 2
    err = capsys.readouterr().err
    assert "line 1: invalid value None for 'instance_id'" in err and "Traceback" not in err
