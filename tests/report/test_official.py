"""farm's verdicts beside a SWE-bench harness results.json (farm/report/official.py): both shapes
of the file, the agreement counts and the disagreements, as text and as data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pytest

from farm.errors import ConfigError
from farm.report.data import RunData
from farm.report.official import agreement, agreement_lines, load_official
from tests.shared import shared_path


def _run(statuses: dict[str, str]) -> RunData:
    rows = [{"trial_key": f"k{i}", "benchmark": "swebench_verified", "arm": "base", "task_id": t, "seed": 0,
             "attempt": 1, "status": s, "finished_at": 1.0,
             "error_class": "prediction_not_applied" if t == "c" else None, "exit_reason": "agent"}
            for i, (t, s) in enumerate(statuses.items())]
    return RunData(meta={"run_id": "r", "config_hash": "h", "config": {}}, plan=pa.table({"x": []}),
                   trials=pa.Table.from_pylist(rows))


def _write(tmp_path: Path, data: object) -> str:
    p = tmp_path / "results.json"
    p.write_text(json.dumps(data))
    return str(p)


RUN = {"a": "resolved", "b": "unresolved", "c": "unresolved", "d": "resolved", "e": "infra_error"}


def test_leaderboard_results_agree_disagree_and_not_graded(tmp_path: Path) -> None:
    official = load_official(_write(tmp_path, {"resolved": ["a", "c", "e"], "no_generation": ["b"], "no_logs": []}))
    assert official.form == "leaderboard"
    a = agreement(_run(RUN), official)
    assert (a.compared, a.agreed) == (4, 2)  # e: farm could not grade it, so it is neither
    assert [p.instance_id for p in a.disagreements] == ["c", "d"]
    assert a.counts == {"farm not graded": 1, "farm resolved, official resolved": 1,
                        "farm resolved, official unresolved": 1, "farm unresolved, official resolved": 1,
                        "farm unresolved, official unresolved": 1}
    reasons = {p.instance_id: p.official_reason for p in a.pairs}
    assert reasons["b"] == "no_generation" and reasons["d"] == "not in 'resolved'"
    text = "\n".join(agreement_lines(a))
    assert "agree on 2 of 4 compared (50.0%)" in text
    assert "c (seed 0): farm unresolved [prediction_not_applied], official resolved [resolved]" in text


def test_a_harness_run_report_and_its_incomplete_instances(tmp_path: Path) -> None:
    report = {"resolved_ids": ["a"], "unresolved_ids": ["b"], "error_ids": ["c"], "empty_patch_ids": [],
              "incomplete_ids": ["d"], "submitted_ids": ["a", "b", "c", "d"], "schema_version": 2}
    a = agreement(_run(RUN), load_official(_write(tmp_path, report)))
    verdicts = {p.instance_id: p.official for p in a.pairs}
    assert verdicts == {"a": "resolved", "b": "unresolved", "c": "unresolved", "d": None, "e": None}
    assert (a.compared, a.agreed, a.disagreements) == (3, 3, [])
    assert a.counts["no official verdict"] == 1 and a.counts["farm not graded"] == 1


def test_the_agreement_is_written_as_csv_and_json(tmp_path: Path) -> None:
    a = agreement(_run(RUN), load_official(_write(tmp_path, {"resolved": ["a"]})))
    csv_path, json_path = a.write(tmp_path / "out")
    lines = list(csv.DictReader(csv_path.open()))
    assert [(r["instance_id"], r["farm"], r["official"], r["agree"]) for r in lines][:2] == [
        ("a", "resolved", "resolved", "True"), ("b", "unresolved", "unresolved", "True")]
    data = json.loads(json_path.read_text())
    assert data["disagreements"] == ["d"] and data["agreed"] == 3 and len(data["pairs"]) == 5


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", "expected a JSON object"),
    ('{"total": 3}', r"neither a leaderboard results.json .* keys: \['total'\]"),
    ('{"resolved": "a"}', r"invalid value for 'resolved': expected a list of instance ids"),
    ("{", "not valid JSON"),
])
def test_a_file_that_is_not_a_results_json_is_named(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "results.json"
    p.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_official(p)


def test_the_published_results_read() -> None:
    path = shared_path("fixtures", "swebench-verified", "predictions", "20241028_agentless-1.5_gpt4o", "results.json")
    official = load_official(path)
    assert sum(1 for v in official.verdict.values() if v == "resolved") == 194
    assert official.of("django__django-13112") == ("unresolved", "no_generation")
