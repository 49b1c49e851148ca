"""bench/official_harness.py's own decisions, in this process: which instances a sweep grades
(a seeded sample that covers every repository before it takes a second from any), what both
sides are given, how a predictions file is named and which instances count as validated. The
whole command on podman is tests/benchmarks/test_official_harness.py."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from farm.report.official import Agreement, Pair

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_official_harness", ROOT / "bench" / "official_harness.py")
oh = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oh)


def _rows() -> dict[str, dict]:
    counts = {"django/django": 30, "sympy/sympy": 20, "psf/requests": 2, "pallets/flask": 1}
    out = {}
    for repo, n in counts.items():
        for k in range(n):
            iid = f"{repo.replace('/', '__')}-{k}"
            out[iid] = {"instance_id": iid, "repo": repo, "patch": f"diff {iid}\n"}
    return out


def test_a_sample_takes_every_repository_before_a_second_instance_of_any():
    rows = _rows()
    picked = oh.choose(sorted(rows), rows, only=None, sample=6, seed=0)
    per_repo = Counter(rows[i]["repo"] for i in picked)
    assert len(picked) == 6 and set(per_repo) == {"django/django", "sympy/sympy", "psf/requests", "pallets/flask"}
    assert max(per_repo.values()) == 2 and picked == sorted(picked)
    # a repository that runs out leaves its turn to the others
    big = oh.choose(sorted(rows), rows, only=None, sample=20, seed=0)
    assert Counter(rows[i]["repo"] for i in big) == {"django/django": 9, "sympy/sympy": 8, "psf/requests": 2,
                                                      "pallets/flask": 1}


def test_a_sample_is_the_same_for_a_seed_and_differs_between_seeds():
    rows = _rows()
    a = oh.choose(sorted(rows), rows, only=None, sample=10, seed=1)
    assert a == oh.choose(list(reversed(sorted(rows))), rows, only=None, sample=10, seed=1)
    assert a != oh.choose(sorted(rows), rows, only=None, sample=10, seed=2)


def test_no_sample_grades_every_instance_the_rows_hold_and_named_ones_must_be_held():
    rows = _rows()
    assert oh.choose([*rows, "astropy__astropy-1"], rows, only=None, sample=None, seed=0) == sorted(rows)
    assert oh.choose(sorted(rows), rows, only=["psf__requests-1"], sample=None, seed=0) == ["psf__requests-1"]
    with pytest.raises(SystemExit, match="astropy__astropy-1"):
        oh.choose(sorted(rows), rows, only=["astropy__astropy-1"], sample=None, seed=0)


def test_both_sides_get_the_chosen_rows_and_the_same_predictions(tmp_path: Path):
    rows = _rows()
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": "sys-x", "model_patch": f"p {i}"})
                             + "\n" for i in ("psf__requests-0", "psf__requests-1", "pallets__flask-0")))
    (tmp_path / "w1").mkdir()
    rows_path, preds_path = oh.write_inputs(tmp_path / "w1", str(preds), rows, ["pallets__flask-0", "psf__requests-1"])
    assert [json.loads(x)["instance_id"] for x in rows_path.read_text().splitlines()] == ["pallets__flask-0",
                                                                                         "psf__requests-1"]
    assert [json.loads(x) for x in preds_path.read_text().splitlines()] == [
        {"instance_id": "pallets__flask-0", "model_name_or_path": "sys-x", "model_patch": "p pallets__flask-0"},
        {"instance_id": "psf__requests-1", "model_name_or_path": "sys-x", "model_patch": "p psf__requests-1"}]
    (tmp_path / "w2").mkdir()
    _, gold = oh.write_inputs(tmp_path / "w2", "gold", rows, ["psf__requests-0"])
    assert json.loads(gold.read_text()) == {"instance_id": "psf__requests-0", "model_name_or_path": "gold",
                                            "model_patch": "diff psf__requests-0\n"}


def test_a_submission_is_named_by_its_folder_and_validated_means_gold_yes_and_empty_no(tmp_path: Path):
    assert oh.source_label("/x/20241028_agentless-1.5_gpt4o/preds.jsonl") == "20241028_agentless-1.5_gpt4o"
    assert oh.source_label("/x/mine.json") == "mine" and oh.source_label("gold") == "gold"
    record = tmp_path / "gold.jsonl"
    record.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "gold": {"verdict": True}, "empty": {"verdict": False}},
        {"id": "b", "gold": {"verdict": True}, "empty": {"verdict": True}},   # the empty patch passes: no test
        {"id": "c", "gold": {"verdict": False}, "empty": {"verdict": False}},
        {"id": "d", "built": False, "gold": None, "empty": None}]) + "\n")
    assert oh.validated_ids(record) == {"a"}


def test_the_table_marks_a_disagreement_and_an_ungraded_trial_apart():
    a = Agreement("r", "results.json", "run_report", [
        Pair("x-1", 0, "resolved", "resolved", "resolved_ids", "agent"),
        Pair("x-2", 0, "resolved", "unresolved", "unresolved_ids", "agent"),
        Pair("x-3", 0, "infra_error", "resolved", "resolved_ids", "sandbox_lost")])
    lines = oh.table(a)
    assert lines[1].split() == ["x-1", "resolved", "resolved", "yes"]
    assert lines[2].split() == ["x-2", "resolved", "unresolved", "NO"]
    assert lines[3].split() == ["x-3", "infra_error", "resolved", "-"]


def test_a_command_outside_its_accepted_statuses_ends_the_sweep_naming_it(tmp_path: Path, capsys):
    import sys

    # farm grade's 4 (some trials still infra_error) is accepted: those pairs are shown apart
    took = oh._run([sys.executable, "-c", "raise SystemExit(4)"], "farm grade", {}, tmp_path, ok=(0, 4))
    assert took >= 0
    with pytest.raises(SystemExit, match=r"farm grade failed \(3\)"):
        oh._run([sys.executable, "-c", "import sys; print('preflight: no engine'); sys.exit(3)"], "farm grade", {},
                tmp_path, ok=(0, 4))
    assert "preflight: no engine" in capsys.readouterr().err
