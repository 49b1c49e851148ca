"""PatchEval Verified's 230 published case records (../shared/fixtures/patcheval-verified: the
records and the benchmark's agent dataset, as published) through ``benchmark=patcheval``: every
record loads, joined with its agent dataset row; a malformed one is named by field and value."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from farm.config import load_config
from farm.errors import TaskFormatError
from farm.tasks.benchmark import load_benchmark_report
from farm.tasks.loading import LoadedBenchmark
from farm.tasks.patcheval import load_patcheval_file
from tests.shared import shared_path

# benchmark.path of a registered source: git is asked whether the copy is a checkout of the pin
pytestmark = pytest.mark.tools("git")

RECORDS = "patcheval_verified.json"
AGENT = "sweagent_dataset.jsonl"


def _published() -> Path:
    return shared_path("fixtures", "patcheval-verified")


def _load(directory: Path, *extra: str) -> LoadedBenchmark:
    return load_benchmark_report(load_config(["benchmark=patcheval", f"benchmark.path={directory}", *extra]).benchmark)


def _agent_rows(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (directory / AGENT).read_text().splitlines() if line.strip()]


def test_the_230_published_records_load_joined_with_the_agent_dataset() -> None:
    published = _published()
    records = {r["cve_id"]: r for r in json.loads((published / RECORDS).read_text())}
    agent = {r["cve_id"]: r for r in _agent_rows(published)}
    loaded = _load(published)
    assert loaded.report.failures == [] and loaded.report.candidates == len(records) == 230
    tasks = {t.task_id: t for t in loaded.tasks}
    assert set(tasks) == set(records) == set(agent)
    # the counts SOURCES.md states, and the records' own field
    by_language = Counter(str(t.metadata["language"]) for t in loaded.tasks)
    assert by_language == Counter(r["programing_language"] for r in records.values())
    assert by_language == {"Go": 83, "JavaScript": 77, "Python": 70}
    images = set((published / "images.txt").read_text().split())
    for cve, task in tasks.items():
        record, row = records[cve], agent[cve]
        # the case image as the benchmark names it (not the agent dataset's older v1 name)
        assert task.environment.image == record["image_url"] and task.environment.image in images
        assert task.environment.image != row["image_name"]
        assert task.benchmark == "patch_eval_verified" and task.verifier.protocol == "patcheval"
        assert (task.verifier_timeout_s, task.agent_network, task.verifier_network) == (600, "no-network", "no-network")
        assert task.metadata["work_dir"] == row["work_dir"]
        assert task.metadata["problem_statement"] == row["problem_statement"].strip()
        assert task.metadata["cwe"] == sorted(record["cwe_info"])
        assert task.metadata["fix_commits"] == record["patch_url"]
        assert record["cve_description"].strip() in task.instruction
        # the agent is not told the fix: neither the fixed function nor the upstream commit
        assert not any(f["snippet"].strip() in task.instruction for f in record["fix_func"] if f["snippet"].strip())
        assert not any(url in task.instruction for url in record["patch_url"])


def test_farm_validate_show_counts_the_records_per_language(capsys: pytest.CaptureFixture[str]) -> None:
    from farm.cli import main

    assert main(["validate", "--show", "benchmark=patcheval", f"benchmark.path={_published()}"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "base / patch_eval_verified:" in out  # the budgets --show prints, for this benchmark
    assert "benchmark 'patch_eval_verified': 230 tasks (Go 83, JavaScript 77, Python 70);" in out


def test_selection_reads_the_selected_records_only() -> None:
    published = _published()
    some = [r["cve_id"] for r in _agent_rows(published)[:2]]
    loaded = _load(published, f"benchmark.task_ids=[{','.join(some)}]")
    assert sorted(t.task_id for t in loaded.tasks) == sorted(some) and loaded.report.failures == []


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "pe"
    shutil.copytree(_published(), copy)
    for f in copy.iterdir():
        f.chmod(0o644)  # ../shared is read-only
    return copy


def _edit(copy: Path, name: str, index: int, **fields: Any) -> str:
    """Set ``fields`` on row ``index`` of the copy's file ``name``; the row's CVE."""
    path = copy / name
    if name == RECORDS:
        rows = json.loads(path.read_text())
        rows[index].update(fields)
        path.write_text(json.dumps(rows))
    else:
        rows = _agent_rows(copy)
        rows[index].update(fields)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(rows[index]["cve_id"])


@pytest.mark.parametrize(("name", "fields", "message"), [
    (RECORDS, {"programing_language": "Rust"},
     "field 'programing_language': expected one of ['Go', 'JavaScript', 'Python'], got 'Rust'"),
    (RECORDS, {"image_url": "ghcr.io/patcheval-cve/patcheval-cve: cve"},
     "field 'image_url': expected an image reference, got 'ghcr.io/patcheval-cve/patcheval-cve: cve'"),
    (RECORDS, {"repo": "TRomesh/ffmpegdotjs"},
     "field 'repo': expected the repository's https URL, got 'TRomesh/ffmpegdotjs'"),
    (RECORDS, {"patch_url": "https://github.com/a/b/commit/1"},
     "field 'patch_url': expected a list of str, got 'https://github.com/a/b/commit/1'"),
    (RECORDS, {"cwe_info": ["CWE-78"]}, "field 'cwe_info': expected a dict, got ['CWE-78']"),
    (RECORDS, {"cve_description": ""}, "field 'cve_description': expected a non-empty string, got ''"),
    (AGENT, {"work_dir": "/tmp/../workspace/x"},
     "field 'work_dir': expected a directory under /workspace, got '/tmp/../workspace/x'"),
    (AGENT, {"work_dir": "/workspace/../etc"},
     "field 'work_dir': expected a directory under /workspace, got '/workspace/../etc'"),
    (AGENT, {"problem_statement": None}, "field 'problem_statement': expected a non-empty string, got None"),
], ids=["language", "image", "repo", "patch_url", "cwe_info", "description", "work_dir", "work_dir_up", "statement"])
def test_a_malformed_record_is_named_by_field_and_value_and_the_rest_load(
        tmp_path: Path, name: str, fields: dict[str, Any], message: str) -> None:
    copy = _copy(tmp_path)
    cve = _edit(copy, name, 7, **fields)
    loaded = _load(copy)
    assert len(loaded.tasks) == 229 and cve not in {t.task_id for t in loaded.tasks}
    (failure,) = loaded.report.failures
    assert failure.cause == "bad_value" and message in failure.message, failure
    # the file that holds the bad value, with the row's position and CVE
    assert failure.file.startswith(str(copy / name)) and cve in failure.file
    with pytest.raises(TaskFormatError, match="^" + str(copy / name).replace(".", r"\.")) as err:
        load_patcheval_file(copy / RECORDS)
    assert message in str(err.value)


def test_an_agent_dataset_that_does_not_match_the_records_is_refused(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    rows = _agent_rows(copy)
    # a row for a CVE the records do not have: the file is not this benchmark's pair
    (copy / AGENT).write_text("".join(json.dumps(r) + "\n" for r in [*rows, {**rows[0], "cve_id": "CVE-2099-0001"}]))
    with pytest.raises(TaskFormatError, match=r"sweagent_dataset\.jsonl\[230\].*'CVE-2099-0001' has no record"):
        _load(copy)
    # a record the agent dataset lacks, and one it names twice: those two fail, the rest load
    (copy / AGENT).write_text("".join(json.dumps(r) + "\n" for r in [*rows[1:], rows[5]]))
    loaded = _load(copy)
    assert len(loaded.tasks) == 228
    messages = {f.message for f in loaded.report.failures}
    assert any("expected one row in the agent dataset" in m and m.endswith("found none") for m in messages)
    assert any(f"sweagent_dataset.jsonl[4], {copy / AGENT}[229]" in m for m in messages), messages


def test_without_the_agent_dataset_the_records_load_alone(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    (copy / AGENT).unlink()
    loaded = _load(copy)
    assert len(loaded.tasks) == 230 and loaded.report.failures == []
    assert all("work_dir" not in t.metadata and "problem_statement" not in t.metadata for t in loaded.tasks)


def test_a_patcheval_checkout_joins_the_agent_dataset_where_upstream_keeps_it(tmp_path: Path) -> None:
    published = _published()
    datasets = tmp_path / "PatchEval" / "patcheval" / "datasets"
    agent = tmp_path / "PatchEval" / "exp_agent" / "sweagent"
    datasets.mkdir(parents=True)
    agent.mkdir(parents=True)
    shutil.copy(published / RECORDS, datasets / RECORDS)
    shutil.copy(published / AGENT, agent / "dataset.jsonl")
    loaded = _load(datasets)
    assert len(loaded.tasks) == 230 and loaded.report.failures == []
    work_dirs = {r["cve_id"]: r["work_dir"] for r in _agent_rows(published)}
    assert {t.task_id: t.metadata["work_dir"] for t in loaded.tasks} == work_dirs
