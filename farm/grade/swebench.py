"""SWE-bench's verdict on a test log, by the ``swebench`` package's own functions, on the host.

The instance's evaluation script (the package's, tests/eval.sh) runs in the sandbox and writes
its whole output to /logs/verifier/test_output.txt; here the package's log parser for the
repository reads it (``get_logs_eval``), its report compares the statuses with FAIL_TO_PASS and
PASS_TO_PASS (``get_eval_tests_report``, fail-only repositories as the package says) and
``get_resolution_status`` decides: resolved iff FULL. Running the parser here rather than inside
the sandbox means it needs no dependencies and no network there, and nothing the agent left in
the sandbox can replace it.

A log without the package's start and end markers, or with one of its error codes (patch or
reset failed, tests errored or timed out), is a verifier that did not run the tests:
``verifier_incomplete``, an infrastructure error — never "unresolved".

The package's parsers keep a test's *last* status line. Patched code that prints a pass line
for a test when the test process exits (after the runner's own summary said it failed) turns the
verdict, in a fresh sandbox as much as in place: the patch alone does it. So a FAIL_TO_PASS or
PASS_TO_PASS test the parse calls passing, but that a line of the same log (read alone by the
same parser) reports failed or errored, is counted failed, and the grade is flagged
``test_log@verifier`` (a tamper suspect). A runner reports a test once per outcome and lists
failures after passes (pytest ``-rA``), so an honest log never has a pass after a failure of
the same test; on the real logs in ../shared the check changes no verdict
(tests/grade/test_swebench_grade.py).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from farm.tasks.swebench import spec


@dataclass
class SwebenchVerdict:
    resolved: bool | None  # None: the log does not hold a test run the package can grade
    status: str  # the package's ResolvedStatus value (FULL/PARTIAL/NO), or why there is none
    report: dict[str, Any] = field(default_factory=dict)  # FAIL_TO_PASS/PASS_TO_PASS success/failure lists
    parsed: dict[str, str] = field(default_factory=dict)  # test -> status, as the parser read the log
    # test -> the failing status a line of the log gave it, where the parse ended on a pass
    contradicted: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        if self.resolved is None:
            return f"[farm swebench] no verdict: {self.status}"
        counts = ", ".join(f"{k} {len(v.get('success', []))} passed / {len(v.get('failure', []))} failed"
                           for k, v in self.report.items() if k in ("FAIL_TO_PASS", "PASS_TO_PASS"))
        note = ""
        if self.contradicted:
            shown = ", ".join(f"{t} ({st})" for t, st in sorted(self.contradicted.items())[:5])
            note = (f"; counted failed: {len(self.contradicted)} test(s) the log reports failed and later "
                    f"passed: {shown}")
        return f"[farm swebench] {self.status} ({counts}); {len(self.parsed)} test statuses parsed{note}"


def grade_log(row: Mapping[str, Any], log: str) -> SwebenchVerdict:
    """The package's verdict on ``log`` for the instance ``row`` (its fields as the dataset has them)."""
    from swebench.harness.constants import (
        END_TEST_OUTPUT,
        FAIL_ONLY_REPOS,
        FAIL_TO_PASS,
        KEY_INSTANCE_ID,
        PASS_TO_PASS,
        START_TEST_OUTPUT,
        EvalType,
        ResolvedStatus,
    )
    from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    test_spec = spec.grading_spec(row)
    if not (START_TEST_OUTPUT in log and END_TEST_OUTPUT in log):
        return SwebenchVerdict(None, "the test log lacks the start/end markers: the tests did not run to the end")
    fd, path = tempfile.mkstemp(prefix="farm-swebench-log-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(log)
        parsed, found = get_logs_eval(test_spec, path)
    finally:
        os.unlink(path)
    if not found:
        return SwebenchVerdict(None, "the package found an error code in the log (patch/reset failed, tests "
                                     "errored or timed out)")
    content = log.split(START_TEST_OUTPUT)[1].split(END_TEST_OUTPUT)[0]  # what get_logs_eval parses
    contradicted = _contradicted(MAP_REPO_TO_PARSER[test_spec.repo], content, test_spec, parsed)
    parsed = {**parsed, **contradicted}
    eval_type = EvalType.FAIL_ONLY if test_spec.repo in FAIL_ONLY_REPOS else EvalType.PASS_AND_FAIL
    ref = {KEY_INSTANCE_ID: test_spec.instance_id, FAIL_TO_PASS: test_spec.FAIL_TO_PASS,
           PASS_TO_PASS: test_spec.PASS_TO_PASS}
    report = get_eval_tests_report(parsed, ref, eval_type=eval_type)
    status = get_resolution_status(report)
    return SwebenchVerdict(status == ResolvedStatus.FULL.value, status, report, dict(parsed), contradicted)


def _contradicted(parser: Callable[[str, Any], dict[str, str]], content: str, test_spec: Any,
                  parsed: Mapping[str, str]) -> dict[str, str]:
    """The graded tests ``parsed`` has passing that a single line of ``content``, read alone by
    ``parser``, reports failed or errored (test -> that status). Every non-blank line is parsed
    once (a parser reads a line in microseconds; matching each line against every graded test
    name instead took seconds on a large PASS_TO_PASS list)."""
    from swebench.harness.constants import TestStatus

    failing = {TestStatus.FAILED.value, TestStatus.ERROR.value}
    watched = {t for t in (*test_spec.FAIL_TO_PASS, *test_spec.PASS_TO_PASS) if parsed.get(t) not in failing | {None}}
    out: dict[str, str] = {}
    for line in content.split("\n") if watched else ():
        if not line.strip():
            continue
        for test, status in parser(line, test_spec).items():
            if test in watched and status in failing:
                out[test] = status
    return out
