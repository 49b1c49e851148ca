"""SWE-bench Pro's verdict from the instance's own parser.py, on the real Pro fixture (the official
Go parser of gravitational/teleport-5dca072b, ../shared/fixtures/harbor/swebench-pro) and on
parsers the tests write: resolved iff every fail_to_pass and pass_to_pass name is PASSED."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.grade.swebench_pro import ParserFailed, decide, grade_logs, run_parser
from tests.shared import shared_path

INSTANCE = "instance_gravitational__teleport-5dca072bb4301f4579a15364fcf37cc0c39f7f6c"


@pytest.fixture(scope="module")
def fixture_dir() -> Path:
    return shared_path("fixtures", "harbor", "swebench-pro", INSTANCE)


@pytest.fixture(scope="module")
def config(fixture_dir: Path) -> dict:
    return json.loads((fixture_dir / "tests" / "config.json").read_text(encoding="utf-8"))


def _go_log(passing: list[str], failing: list[str] = ()) -> str:
    """``go test -v`` output: a RUN line per test, then its PASS/FAIL line."""
    lines = [f"=== RUN   {t}" for t in [*passing, *failing]]
    lines += [f"    --- PASS: {t} (0.01s)" for t in passing] + [f"    --- FAIL: {t} (0.02s)" for t in failing]
    return "\n".join([*lines, "FAIL" if failing else "PASS", "ok  \tgithub.com/gravitational/teleport/lib/kube"]) + "\n"


def test_the_official_parser_on_a_gold_like_log_resolves(fixture_dir: Path, config: dict) -> None:
    required = config["fail_to_pass"] + config["pass_to_pass"]
    verdict = grade_logs(config, fixture_dir / "tests" / "parser.py", _go_log(required + ["TestOther"]), "", "0\n")
    assert (verdict.resolved, verdict.status, verdict.missing) == (True, "resolved", [])
    assert verdict.statuses["TestMTLSClientCAs/1000_CAs"] == "PASSED" and len(verdict.statuses) == len(required) + 1


def test_one_failing_fail_to_pass_test_is_unresolved_and_named(fixture_dir: Path, config: dict) -> None:
    failing = "TestAuthenticate/custom_kubernetes_cluster_in_local_cluster"
    assert failing in config["fail_to_pass"]
    passing = [t for t in config["fail_to_pass"] if t != failing]
    verdict = grade_logs(config, fixture_dir / "tests" / "parser.py", _go_log(passing, [failing]), "", "0\n")
    assert (verdict.resolved, verdict.missing) == (False, [failing])
    assert verdict.statuses[failing] == "FAILED" and failing in verdict.summary()


def test_a_panic_makes_the_running_test_an_error_not_a_pass(fixture_dir: Path, config: dict) -> None:
    # the official parser marks the test that was running when Go panicked ERROR: not PASSED
    log = "=== RUN   TestMTLSClientCAs\npanic: runtime error: index out of range\n"
    tests = run_parser(fixture_dir / "tests" / "parser.py", log, "")
    assert tests == [{"name": "TestMTLSClientCAs", "status": "ERROR"}]
    assert decide(tests, config["fail_to_pass"], []).resolved is False


def test_a_build_failure_with_no_test_lines_is_unresolved(fixture_dir: Path, config: dict) -> None:
    verdict = grade_logs(config, fixture_dir / "tests" / "parser.py", "", "# lib/kube/proxy\nundefined: x\n", "2\n")
    assert verdict.resolved is False
    assert verdict.statuses == {"NO_TESTS_FOUND_OR_PARSING_ERROR": "ERROR"}


@pytest.mark.parametrize("status", ["SKIPPED", "ERROR", "FAILED", None])
def test_only_passed_counts(status: str | None) -> None:
    tests = [{"name": "a", "status": "PASSED"}] + ([{"name": "b", "status": status}] if status else [])
    assert decide(tests, ["a"], ["b"]).resolved is False
    assert decide(tests, ["a"], []).resolved is True


def test_a_name_passed_once_counts_as_the_official_set_does() -> None:
    # the official rule builds the set of names with status PASSED: a later duplicate entry does not remove it
    tests = [{"name": "a", "status": "PASSED"}, {"name": "a", "status": "FAILED"}]
    assert decide(tests, ["a"], []).resolved is True


def _parser(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "parser.py"
    path.write_text("import json, sys\n" + body, encoding="utf-8")
    return path


def test_a_crashing_parser_is_no_verdict_not_unresolved(tmp_path: Path) -> None:
    verdict = grade_logs({"fail_to_pass": ["a"]}, _parser(tmp_path, "raise RuntimeError('boom')\n"), "x", "", "0\n")
    assert verdict.resolved is None and "exited 1" in verdict.status and "boom" in verdict.status


@pytest.mark.parametrize("body,message", [
    ("pass\n", "wrote no output JSON"),
    ("open(sys.argv[3], 'w').write('{')\n", "invalid JSON"),
    ("json.dump({'results': []}, open(sys.argv[3], 'w'))\n", "without a 'tests' list"),
])
def test_a_parser_without_a_tests_list_is_refused(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ParserFailed, match=message):
        run_parser(_parser(tmp_path, body), "x", "")


def test_the_parser_gets_the_official_arguments_and_both_logs(tmp_path: Path) -> None:
    body = ("out, err = open(sys.argv[1]).read(), open(sys.argv[2]).read()\n"
            "tests = [{'name': n.strip(), 'status': 'PASSED'} for n in (out, err)]\n"
            "json.dump({'tests': tests}, open(sys.argv[3], 'w'))\n")
    assert decide(run_parser(_parser(tmp_path, body), "from-stdout\n", "from-stderr\n"),
                  ["from-stdout"], ["from-stderr"]).resolved is True


def test_no_run_script_logs_is_no_verdict(tmp_path: Path) -> None:
    parser = _parser(tmp_path, "json.dump({'tests': []}, open(sys.argv[3], 'w'))\n")
    assert grade_logs({}, parser, None, None, None).resolved is None
    assert "did not run it to the end" in grade_logs({}, parser, "out", "err", None).status
