"""farm's SWE-bench verdict on a test log (farm/grade/swebench.py) against the published reports,
the statuses the package's parsers give, and the package's own ``get_eval_report`` on the same log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from swebench.harness import constants as C
from swebench.harness.grading import get_eval_report
from swebench.harness.test_spec import python as swebench_python
from swebench.harness.test_spec.test_spec import make_test_spec

from farm.grade.swebench import grade_log
from farm.tasks.swebench.rows import read_rows
from tests.shared import shared_path
from tests.support.offline import refuse_network

IDS = ("django__django-11603", "sympy__sympy-13480", "astropy__astropy-12907")
ERROR_CODES = (C.APPLY_PATCH_FAIL, C.RESET_FAILED, C.TESTS_ERROR, C.TESTS_TIMEOUT)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_network(monkeypatch, "grading")


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, Any]]:
    path = shared_path("fixtures", "swebench-verified", "swebench-verified.jsonl")
    return {r["instance_id"]: r for r in read_rows(path) if r["instance_id"] in IDS}


def _fixture(name: str) -> Path:
    return shared_path("fixtures", "grading", name)


def _wrapped(instance_id: str) -> str:
    """The excerpt between the package's markers, as Harbor's parser wraps the captured output
    (the harness that wrote these logs printed none; fixtures/grading/SOURCES.md)."""
    excerpt = _fixture(f"log_{instance_id}.test_output_excerpt.txt").read_text(encoding="utf-8")
    return f"{C.START_TEST_OUTPUT}\n{excerpt}\n{C.END_TEST_OUTPUT}"


def _package_report(row: dict[str, Any], log: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``get_eval_report`` on ``log`` with the TestSpec the package itself makes for the row
    (its environment recipe is not graded, so the requirement downloads answer empty here)."""
    monkeypatch.setattr(swebench_python, "get_requirements_by_commit", lambda repo, commit: "")
    monkeypatch.setattr(swebench_python, "get_environment_yml_by_commit", lambda repo, commit, env: "")
    test_spec = make_test_spec(dict(row))
    path = tmp_path / f"{row['instance_id']}.log"
    path.write_text(log, encoding="utf-8")
    prediction = {C.KEY_INSTANCE_ID: row["instance_id"], C.KEY_PREDICTION: "diff", C.KEY_MODEL: "farm-test"}
    return get_eval_report(test_spec, prediction, str(path), include_tests_status=True)[row["instance_id"]]


def _agrees(row: dict[str, Any], log: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    verdict = grade_log(row, log)
    package = _package_report(row, log, tmp_path, monkeypatch)
    assert package["patch_successfully_applied"] is (verdict.resolved is not None)
    if verdict.resolved is not None:
        assert verdict.resolved is package["resolved"]
        assert verdict.report == package["tests_status"]
    return verdict


@pytest.mark.parametrize("instance_id", IDS)
def test_real_logs_get_the_published_verdict_and_the_packages(instance_id: str, rows: dict[str, dict[str, Any]],
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    row = rows[instance_id]
    original = json.loads(_fixture(f"log_{instance_id}.report.original.json").read_text())[instance_id]
    expected = json.loads(_fixture(f"log_{instance_id}.expected_parsed.json").read_text())
    verdict = _agrees(row, _wrapped(instance_id), tmp_path, monkeypatch)
    assert verdict.resolved is original["resolved"] is expected["resolved_in_original_report"]
    assert verdict.parsed == expected["status_map"]
    assert verdict.contradicted == {}  # no honest log reports a pass after a failure of the same test
    assert verdict.report == original["tests_status"]
    assert verdict.status == (C.ResolvedStatus.FULL.value if original["resolved"] else C.ResolvedStatus.NO.value)
    assert verdict.summary().startswith(f"[farm swebench] {verdict.status}")


def test_one_fail_to_pass_test_failing_is_partial_and_unresolved(rows: dict[str, dict[str, Any]], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    instance_id = "django__django-11603"
    f2p = rows[instance_id]["FAIL_TO_PASS"][0]
    log = _wrapped(instance_id)
    assert f"{f2p} ... ok" in log
    verdict = _agrees(rows[instance_id], log.replace(f"{f2p} ... ok", f"{f2p} ... FAIL"), tmp_path, monkeypatch)
    assert (verdict.resolved, verdict.status) == (False, C.ResolvedStatus.PARTIAL.value)
    assert verdict.report["FAIL_TO_PASS"]["failure"] == [f2p]


# each parser's line for a test that failed, and for one that passed
_LINES = {"django__django-11603": ("{t} ... FAIL", "{t} ... ok"), "sympy__sympy-13480": ("{t} F", "{t} ok"),
          "astropy__astropy-12907": ("FAILED {t}", "PASSED {t}")}


@pytest.mark.parametrize("instance_id", IDS)
def test_a_pass_printed_after_the_runners_failure_does_not_count(instance_id: str, rows: dict[str, dict[str, Any]],
                                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """Patched code that prints the parser's pass lines when the test process exits, after the
    runner reported the FAIL_TO_PASS tests failed: the package's parser keeps the last line and
    resolves; farm counts those tests failed and says why."""
    row = rows[instance_id]
    failed, passed = _LINES[instance_id]
    f2p = row["FAIL_TO_PASS"]
    # a pass line for every graded test (the astropy excerpt lacks some PASS_TO_PASS lines)
    tail = "\n".join([*(failed.format(t=t) for t in f2p), *(passed.format(t=t) for t in f2p + row["PASS_TO_PASS"])])
    log = _wrapped(instance_id).replace(C.END_TEST_OUTPUT, f"{tail}\n{C.END_TEST_OUTPUT}")
    package = _package_report(row, log, tmp_path, monkeypatch)
    assert package["resolved"] is True  # the package is fooled: the last line wins
    verdict = grade_log(row, log)
    # (the astropy excerpt's own failed PASS_TO_PASS lines are contradicted too)
    assert verdict.resolved is False and set(f2p) <= set(verdict.contradicted)
    assert verdict.report["FAIL_TO_PASS"]["failure"] == f2p
    assert "reports failed and later passed" in verdict.summary()


def test_markers_around_no_test_output_are_unresolved_not_an_error(rows: dict[str, dict[str, Any]], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # the tests ran (both markers) and reported nothing: every FAIL_TO_PASS test is missing, so failed
    verdict = _agrees(rows["sympy__sympy-13480"], f"{C.START_TEST_OUTPUT}\n{C.END_TEST_OUTPUT}\n", tmp_path,
                      monkeypatch)
    assert (verdict.resolved, verdict.status, verdict.parsed) == (False, C.ResolvedStatus.NO.value, {})


@pytest.mark.parametrize("cut", ["both", "start", "end"])
def test_a_log_without_the_markers_is_no_verdict_never_unresolved(cut: str, rows: dict[str, dict[str, Any]]) -> None:
    log = _wrapped("django__django-11603")
    if cut in ("both", "start"):
        log = log.replace(C.START_TEST_OUTPUT, "")
    if cut in ("both", "end"):
        log = log.replace(C.END_TEST_OUTPUT, "")
    verdict = grade_log(rows["django__django-11603"], log)
    assert verdict.resolved is None and "markers" in verdict.status
    assert verdict.summary().startswith("[farm swebench] no verdict")


@pytest.mark.parametrize("code", ERROR_CODES)
def test_an_error_code_in_the_log_is_no_verdict(code: str, rows: dict[str, dict[str, Any]], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # a passing run with the harness's error code: the package calls it not applied, farm no verdict
    row = rows["django__django-11603"]
    log = f"{code}\n{_wrapped(row['instance_id'])}"
    assert grade_log(row, _wrapped(row["instance_id"])).resolved is True
    verdict = _agrees(row, log, tmp_path, monkeypatch)
    assert verdict.resolved is None and "error code" in verdict.status


def test_the_test_lists_may_come_as_the_dataset_encodes_them(rows: dict[str, dict[str, Any]]) -> None:
    row = rows["astropy__astropy-12907"]
    encoded = {**row, "FAIL_TO_PASS": json.dumps(row["FAIL_TO_PASS"]), "PASS_TO_PASS": json.dumps(row["PASS_TO_PASS"])}
    log = _wrapped(row["instance_id"])
    assert grade_log(encoded, log).report == grade_log(row, log).report


@pytest.mark.parametrize(("failing", "resolved"), [((), True), (("renders a heading",), False),
                                                   (("keeps a list",), False), (("an unlisted test",), True)])
def test_a_fail_only_repository_counts_tests_absent_from_the_log_as_passed(
        failing: tuple[str, ...], resolved: bool, rows: dict[str, dict[str, Any]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    repo = "markedjs/marked"
    assert repo in C.FAIL_ONLY_REPOS and "1.0" in C.MAP_REPO_VERSION_TO_SPECS[repo]
    row = {**rows["sympy__sympy-13480"], "instance_id": "markedjs__marked-1", "repo": repo, "version": "1.0",
           "FAIL_TO_PASS": ["renders a heading"], "PASS_TO_PASS": ["keeps a list"]}
    # the marked parser reads only failures ("1) name"); a passing run lists none
    body = "Started\n" + "".join(f"{n}) {name}\n  Message: failed\n" for n, name in enumerate(failing, 1))
    verdict = _agrees(row, f"{C.START_TEST_OUTPUT}\n{body}{C.END_TEST_OUTPUT}\n", tmp_path, monkeypatch)
    assert verdict.resolved is resolved
    assert verdict.parsed == {name: C.TestStatus.FAILED.value for name in failing}
