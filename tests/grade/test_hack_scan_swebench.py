"""The patch scan on real data (../shared): no SWE-bench Verified gold patch is flagged, and each
instance's own test_patch, scanned as if an agent had written it, flags ``test_edit``."""

from __future__ import annotations

import json

from farm.grade.hack_patch import scan_patch, task_test_files
from farm.tasks.model import Environment, Task, VerifierSpec
from tests.shared import shared_path


def _rows() -> list[dict]:
    path = shared_path("fixtures", "swebench-verified", "swebench-verified.jsonl")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_gold_patches_are_clean_and_test_patches_edit_the_tests() -> None:
    rows = _rows()
    assert len(rows) >= 100
    flagged_gold, unflagged_tests = [], []
    for row in rows:
        task = Task("swebench-verified", row["instance_id"], "", Environment(workdir="/testbed"),
                    VerifierSpec(protocol="swebench"), metadata={"swebench": {"test_patch": row["test_patch"]}})
        tests = task_test_files(task)
        if scan_patch(row["patch"], tests):
            flagged_gold.append(row["instance_id"])
        if "test_edit" not in {rule for rule, _ in scan_patch(row["test_patch"], tests)}:
            unflagged_tests.append(row["instance_id"])
    assert flagged_gold == [] and unflagged_tests == []
