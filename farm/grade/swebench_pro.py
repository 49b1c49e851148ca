"""SWE-bench Pro's verdict: the instance's own ``parser.py`` on the run script's logs, then the official rule.

``tests/test.sh`` (farm/tasks/swebench_pro/task_dir.py) leaves the run script's stdout, stderr and
exit status in /logs/verifier. Here, on the host, the instance's ``parser.py`` (the copy in the
task directory, out of the agent's reach) is run on those logs as the official grader runs it —
``python parser.py STDOUT STDERR OUTPUT_JSON`` — and its JSON, ``{"tests": [{"name", "status"}]}``,
decides as ``swe_bench_pro_eval.py`` does: resolved iff every ``fail_to_pass`` and ``pass_to_pass``
name is among the names with status ``PASSED`` (SKIPPED, ERROR, FAILED or absent: not resolved).

Where the official script counts a missing ``output.json`` or a parser exception as "not
resolved", farm says the verifier did not finish (``verifier_incomplete``, an infrastructure error
that is retried and reported, never a silent 0): a run script that never ran or a parser that
crashed measured nothing about the patch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATUSES = ("PASSED", "FAILED", "SKIPPED", "ERROR")
PARSER_TIMEOUT_S = 300.0


class ParserFailed(RuntimeError):
    """The instance's parser.py did not produce a test-status JSON."""


@dataclass
class ProVerdict:
    resolved: bool | None  # None: no test statuses to grade
    status: str  # "resolved" / "unresolved", or why there is no verdict
    missing: list[str] = field(default_factory=list)  # required tests not PASSED
    statuses: dict[str, str] = field(default_factory=dict)  # name -> status as the parser reported

    def summary(self) -> str:
        if self.resolved is None:
            return f"[farm swebench-pro] no verdict: {self.status}"
        head = f"[farm swebench-pro] {self.status}; {len(self.statuses)} test statuses parsed"
        if self.missing:
            shown = ", ".join(self.missing[:10]) + (" ..." if len(self.missing) > 10 else "")
            head += f"; {len(self.missing)} required test(s) not PASSED: {shown}"
        return head


def run_parser(parser: Path, stdout: str, stderr: str, *, timeout_s: float = PARSER_TIMEOUT_S) -> list[dict[str, Any]]:
    """The ``tests`` list ``parser`` writes for these logs.

    The parser runs in a fresh interpreter (``-I``: no site directory, no environment, no
    current directory on the path) in a scratch directory, with the arguments the official
    grader passes.

    Raises:
        ParserFailed: it exited non-zero, timed out, wrote no JSON, or JSON of another shape.
    """
    with tempfile.TemporaryDirectory(prefix="farm-swebench-pro-") as tmp:
        out, err, result = Path(tmp, "stdout.log"), Path(tmp, "stderr.log"), Path(tmp, "output.json")
        out.write_text(stdout, encoding="utf-8")
        err.write_text(stderr, encoding="utf-8")
        try:
            res = subprocess.run([sys.executable, "-I", str(parser), str(out), str(err), str(result)], cwd=tmp,
                                 capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ParserFailed(f"{parser.name} ran past {timeout_s:g}s") from None
        if res.returncode != 0:
            tail = res.stderr.decode("utf-8", errors="replace").strip().splitlines()[-3:]
            raise ParserFailed(f"{parser.name} exited {res.returncode}: {' | '.join(tail)}")
        if not result.is_file():
            raise ParserFailed(f"{parser.name} wrote no output JSON")
        try:
            data = json.loads(result.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ParserFailed(f"{parser.name} wrote invalid JSON: {exc}") from None
    tests = data.get("tests") if isinstance(data, dict) else None
    if not isinstance(tests, list) or not all(isinstance(t, dict) for t in tests):
        raise ParserFailed(f"{parser.name} wrote JSON without a 'tests' list of objects")
    return tests


def decide(tests: Iterable[Mapping[str, Any]], fail_to_pass: Iterable[str], pass_to_pass: Iterable[str]) -> ProVerdict:
    """The official rule on a parser's ``tests`` list."""
    tests = list(tests)
    passed = {t.get("name", "") for t in tests if t.get("status") == "PASSED"}
    required = set(fail_to_pass) | set(pass_to_pass)
    missing = sorted(required - passed)
    statuses = {str(t.get("name", "")): str(t.get("status")) for t in tests}
    resolved = not missing
    return ProVerdict(resolved, "resolved" if resolved else "unresolved", missing, statuses)


def grade_logs(row: Mapping[str, Any], parser: Path, stdout: str | None, stderr: str | None,
               exit_text: str | None) -> ProVerdict:
    """The verdict for the instance ``row`` (its ``fail_to_pass``/``pass_to_pass`` lists) on the
    logs tests/test.sh left; ``exit_text`` is the run script's exit status file."""
    if stdout is None or exit_text is None:
        return ProVerdict(None, "the run script left no logs: tests/test.sh did not run it to the end")
    try:
        tests = run_parser(parser, stdout, stderr or "")
    except ParserFailed as exc:
        return ProVerdict(None, f"the instance's parser failed: {exc}")
    return decide(tests, row.get("fail_to_pass") or [], row.get("pass_to_pass") or [])
