"""scripts/swebench_gold.py's bookkeeping (the numbers docs/benchmarks.md quotes): the per-repository
table, the cause given to every instance that is not valid, and resuming without running twice."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from .standin import REPO

SCRIPT = REPO / "scripts" / "swebench_gold.py"


def _script():
    spec = importlib.util.spec_from_file_location("swebench_gold_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    finally:
        del sys.modules[spec.name]
    return mod


def _rec(iid: str, repo: str, **kw) -> dict:
    return {"id": iid, "repo": repo, "version": "1.0", **kw}


RECORDS = [
    _rec("a__a-1", "a/a", built=True, gold={"verdict": True, "official": True}, empty={"verdict": False,
                                                                                       "official": False}),
    _rec("a__a-2", "a/a", built=True, gold={"verdict": False, "official": False, "failing": ["t::x"]},
         empty={"verdict": False, "official": False}),
    _rec("a__a-3", "a/a", built=True, gold={"verdict": True, "official": False}, empty={"verdict": False,
                                                                                        "official": False}),
    _rec("b__b-1", "b/b", built=False, error="benchmark.repos: /m/b+b has no commit 123 (base_commit ...)"),
    _rec("b__b-2", "b/b", built=False, error="b__b-2: SWE-bench needs CPython 3.5 and benchmark.pythons=..."),
    _rec("b__b-3", "b/b", built=True, gold={"verdict": True, "official": True}, empty={"verdict": None}),
    _rec("b__b-4", "b/b", built=True, gold={"verdict": None, "why": "timeout after 1800 s"},
         empty={"verdict": False, "official": False}),
    _rec("b__b-5", "b/b", built=False, error="building the SWE-bench layer x setup_env.sh ... name resolution"),
    _rec("b__b-6", "b/b", built=True, gold={"verdict": False, "official": False, "failing": ["t::y"]},
         empty={"verdict": False, "official": False}),
]


def test_summary_counts_each_repository_and_the_disagreements(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    table = _script().summary(tmp_path).splitlines()
    assert table[2] == "| a/a | 3 | 3 | 2 | 3 | 2 | 1 |"  # a__a-3: farm and the package disagree
    assert table[3] == "| b/b | 6 | 3 | 1 | 2 | 0 | 0 |"
    assert table[4] == "| **all** | **9** | **6** | **3** | **5** | **2** | **1** |"


def test_every_invalid_instance_gets_a_cause(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a__a-2.gold.log").write_text("pip: Temporary failure in name resolution\n+ : '>>>>> Start "
                                                       "Test Output'\nE ModuleNotFoundError: No module named 'x'\n")
    (tmp_path / "logs" / "b__b-6.gold.log").write_text("+ : '>>>>> Start Test Output'\nE gaierror: Temporary "
                                                       "failure in name resolution\n")
    gold = _script()
    causes = {r["id"]: gold.cause(r, tmp_path) for r in RECORDS}
    assert causes["a__a-1"] is None and causes["a__a-3"] is None  # valid (the disagreement is counted apart)
    assert "a module the patch needs is not installed" in causes["a__a-2"]
    assert causes["b__b-1"] == "not built: the mirror lacks a commit it needs"
    assert causes["b__b-2"] == "not built: no CPython for the spec's version here"
    assert causes["b__b-3"] == "empty: no verdict"
    assert causes["b__b-4"] == "gold: no verdict (timeout after 1800 s)"
    assert causes["b__b-5"] == "not built: setup_env.sh failed (network lookups failed)"
    assert "tests call a network service" in causes["b__b-6"]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    listed = gold.failures(tmp_path)
    assert listed.count("\n| ") == 7 and "a__a-1" not in listed


def test_a_resumed_run_skips_what_is_recorded(tmp_path: Path, monkeypatch) -> None:
    """Instances already in results.jsonl are not run again (here nothing is left to run)."""
    rows = tmp_path / "rows.jsonl"
    row = {"instance_id": "a__a-1", "repo": "a/a", "base_commit": "0" * 40, "version": "1.0", "patch": "",
           "test_patch": "", "problem_statement": "p", "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}
    rows.write_text(json.dumps(row) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text(json.dumps(RECORDS[0]) + "\n")
    (tmp_path / "mirror").mkdir()
    gold = _script()
    ran: list[str] = []

    async def one(row, args, root):  # noqa: ANN001 - the script's own signature
        ran.append(row["instance_id"])
        return {}

    monkeypatch.setattr(gold, "one", one)
    assert gold.main(["--rows", str(rows), "--repos", str(tmp_path / "mirror"), "--out", str(out)]) == 0
    assert ran == []


def test_the_valid_instances_go_into_the_ceiling_file_as_measured_passes(tmp_path: Path) -> None:
    from farm.tasks.ceiling import load_ceiling

    recs = [dict(r, id=iid, date="2026-12-03") for r, iid in ((RECORDS[0], "astropy__astropy-12907"),
                                                              (RECORDS[1], "django__django-11099"))]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    shipped = REPO / "farm" / "tasks" / "ceilings" / "swebench_verified.json"
    ceilings = tmp_path / "ceilings"
    ceilings.mkdir()
    (ceilings / shipped.name).write_text(shipped.read_text())
    _script().merge_ceiling(tmp_path, "abc1234", ceilings)
    ceiling = load_ceiling("swebench_verified", ceilings)
    doc = json.loads((ceilings / shipped.name).read_text())
    assert doc["tasks"]["astropy__astropy-12907"]["status"] == "pass"
    assert doc["tasks"]["astropy__astropy-12907"]["provenance"] == "farm-swebench-gold-abc1234"
    assert "django__django-11099" not in doc["tasks"]  # its gold failed here: not written
    assert doc["provenance"]["farm-swebench-gold-abc1234"]["kind"] == "measured"
    assert ceiling is not None
    _script().merge_ceiling(tmp_path, "def5678", ceilings)  # a later sitting records its own block
    doc = json.loads((ceilings / shipped.name).read_text())
    assert doc["tasks"]["astropy__astropy-12907"]["provenance"] == "farm-swebench-gold-def5678"
    assert load_ceiling("swebench_verified", ceilings) is not None


def _fake_podman(tmp_path: Path, monkeypatch, rc: int) -> Path:
    """A ``podman`` on PATH that records its argv and exits ``rc`` (125 is podman's own failure)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    argv_file = tmp_path / "argv"
    exe = bindir / "podman"
    exe.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv_file}\necho engine-said-no\nexit {rc}\n')
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{__import__('os').environ['PATH']}")
    return argv_file


@pytest.mark.tools
def test_run_eval_mounts_absolute_paths_from_a_relative_out(tmp_path, monkeypatch):
    # podman reads a relative -v source as a volume name and never starts the container: every
    # instance then looked like "no verdict" (seen with --out build/swebench-gold)
    argv_file = _fake_podman(tmp_path, monkeypatch, rc=0)
    monkeypatch.chdir(tmp_path)
    log, _, timed_out = _script().run_eval("img", Path("rel/task"), gold=False)
    mounts = [a for a in argv_file.read_text().splitlines() if ":/tests" in a or ":/solution" in a]
    assert len(mounts) == 2 and not timed_out and "engine-said-no" in log
    assert all(m.startswith(str(tmp_path / "rel" / "task")) for m in mounts), mounts


@pytest.mark.tools
def test_engine_failure_is_raised_not_graded(tmp_path, monkeypatch):
    _fake_podman(tmp_path, monkeypatch, rc=125)
    mod = _script()
    try:
        mod.run_eval("img", tmp_path / "task", gold=True)
    except mod.EngineError as exc:
        assert "engine-said-no" in str(exc)
    else:
        raise AssertionError("a podman failure (exit 125) must not be returned as a test log")
