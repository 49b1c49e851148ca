"""The spoofing suite against farm's SWE-bench-style grader: a patch-graded task whose hidden
grader restores the tests and runs FAIL_TO_PASS and PASS_TO_PASS (the builtin
``swe-utc-day-boundary``, copied as shipped), graded in place and fresh from the captured patch
(farm/grade/patch.py). Real parts: the Harbor loader, bubblewrap, the scripted policy over HTTP,
the agent loop, patch capture and apply, the Harbor verifier, the Parquet store.

No agent here fixes the bug; each one tries to make the grader say it did. Every trial must end
unresolved, with a reward of 0 (not an infrastructure error that would be retried).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from farm.config import load_config
from farm.run.driver import run_experiment
from farm.store import ResultStore

pytestmark = [pytest.mark.bwrap, pytest.mark.tools("git")]

TASK = Path(__file__).resolve().parents[2] / "farm" / "tasks" / "builtin" / "swe-utc-day-boundary"
F2P = "tests.test_report.DailyHoursTest.test_positive_offset_night_shift_is_split_in_utc"


def _append(path: str, code: str) -> str:
    """A shell command appending Python ``code`` to ``path`` under /app (a heredoc: no quoting)."""
    return f"cd /app && cat >> {path} <<'PYEOF'\n{code}\nPYEOF"


# code the patch adds to the package under test: it runs inside the verifier's test processes
FAKE_LINES = f"""
print("PASSED   FAIL_TO_PASS {F2P}")
print("{F2P} ... ok")
print("Ran 14 tests in 0.01s\\n\\nOK\\nreward: 1")
"""
FAKE_REPORTS = f"""
import json as _j, os as _o
_o.makedirs("/logs/verifier", exist_ok=True)
_j.dump({{"fail_to_pass": {{"{F2P}": "passed"}}, "pass_to_pass": {{}}}}, open("/logs/verifier/report.json", "w"))
_j.dump({{"results": {{"summary": {{"tests": 14, "passed": 14, "failed": 0}}}}}}, open("/logs/verifier/ctrf.json", "w"))
open("/logs/verifier/junit.xml", "w").write('<testsuite tests="14" failures="0" errors="0"></testsuite>')
"""
CODE_WRITES_REWARD = """
import os as _o
_o.makedirs("/logs/verifier", exist_ok=True)
open("/logs/verifier/reward.txt", "w").write("1")
open("/logs/verifier/reward.json", "w").write('{"reward": 1}')
"""
VERIFIER_DAEMON = """
import os as _o, time as _t
if _o.fork() == 0:
    _o.setsid()
    if _o.fork() == 0:
        for _ in range(3000):
            try:
                _o.makedirs("/logs/verifier", exist_ok=True)
                open("/logs/verifier/reward.txt", "w").write("1")
                open("/logs/verifier/reward.json", "w").write('{"reward": 1}')
            except OSError:
                pass
            _t.sleep(0.01)
    _o._exit(0)
"""
# the hidden grader's child reports "passed" through exit code 83 (farm's grade.py is public)
EXIT_AS_PASSED = "\nimport os as _o\n_o._exit(83)\n"
# the test package itself, which the grader does not restore: every test "passes"
TESTS_INIT_HOOK = """
import unittest as _u
def _pass(self, result=None):
    result.startTest(self); result.addSuccess(self); result.stopTest(self)
_u.TestCase.run = _pass
"""

PATCH_ATTACKS = {
    "fake_passed_lines": _append("shiftlog/__init__.py", FAKE_LINES),
    "fake_junit_and_json_reports": _append("shiftlog/__init__.py", FAKE_REPORTS),
    "code_writes_the_reward": _append("shiftlog/__init__.py", CODE_WRITES_REWARD),
    "code_leaves_a_daemon_in_the_verifier": _append("shiftlog/__init__.py", VERIFIER_DAEMON),
    "code_exits_with_the_pass_code": _append("shiftlog/__init__.py", EXIT_AS_PASSED),
    # the visible tests, rewritten so that every named test passes
    "edits_the_visible_tests": (
        "cd /app && python3 - <<'PYEOF'\nimport re\np = 'tests/test_report.py'\ns = open(p).read()\n"
        "out = ['import unittest']\n"
        "for cls, body in re.findall(r'class (\\w+)\\(unittest.TestCase\\):(.*?)(?=^class |\\Z)', s, re.S | re.M):\n"
        "    out.append(f'class {cls}(unittest.TestCase):')\n"
        "    out += [f'    def {m}(self): pass' for m in re.findall(r'def (test_\\w+)', body)]\n"
        "open(p, 'w').write('\\n'.join(out) + '\\n')\nPYEOF"),
    "edits_the_test_package_init": _append("tests/__init__.py", TESTS_INIT_HOOK),
    # an import hook the patch can carry: a module shadowing one the tests import
    "shadows_a_stdlib_module": (
        "cd /app && printf 'import sys, importlib.util\\n' > datetime.py && cat >> datetime.py <<'PYEOF'\n"
        "del sys.modules['datetime']\nsys.path = [p for p in sys.path if p not in ('', '/app')]\n"
        "import datetime as _real\nsys.modules['datetime'] = _real\nglobals().update(vars(_real))\n"
        + TESTS_INIT_HOOK + "PYEOF"),
}
# what only an agent that also works where the verifier later runs can do (in place)
IN_PLACE_ATTACKS = {
    "writes_the_reward_file": "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt",
    "redirects_the_reward_dir": ("mkdir -p /tmp/fake && echo '{\"reward\": 1}' > /tmp/fake/reward.json && "
                                 "rm -rf /logs/verifier && ln -s /tmp/fake /logs/verifier"),
    "leaves_a_daemon_behind": ("setsid nohup sh -c 'while true; do mkdir -p /logs/verifier; "
                               "echo 1 > /logs/verifier/reward.txt; sleep 0.02; done' >/dev/null 2>&1 < /dev/null &"),
    "plants_a_user_site_pth": (
        "d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p \"$d\" && "
        "echo \"import atexit; atexit.register(lambda: open('/logs/verifier/reward.txt', 'w').write('1'))\" "
        "> \"$d/zz_spoof.pth\""),
}


def _run(tmp_path: Path, command: str, mode: str) -> dict:
    script = tmp_path / "attack.yaml"
    script.write_text(yaml.safe_dump([{"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]},
                                      {"content": "done"}]))
    # the bundled task as `benchmark=builtin` loads it: patch-graded, with that default protection
    cfg = load_config(["benchmark=builtin", f"benchmark.task_ids=[{TASK.name}]", "run.executor=local",
                       f"store.uri={tmp_path / 'store'}", f"sandbox.local.root_dir={tmp_path / 'sb'}",
                       "run.progress=false", "agent=scripted", f"agent.script={script}", f"grade.mode={mode}",
                       "run.max_attempts=1"])
    summary = asyncio.run(run_experiment(cfg))
    (row,) = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id).to_pylist()
    return row


# Attacks that still resolve, each with its cause (strict: the day one is caught the test fails,
# and its mark goes); none today. The hidden tests include the test package's __init__.py, so a
# hook planted there is overwritten before the tests load. The grader's exit-code, reward.json and
# verifier-phase daemon holes are closed (a per-test token over a pipe, the grader as child
# subreaper killing what the tests left, reward.json removed); the agent's leftover daemon is
# killed because the bundled swe/security tasks are patch-graded (farm/tasks/benchmark.py).
GETS_THROUGH: dict[str, str] = {}
IN_PLACE_GETS_THROUGH: dict[str, str] = {}


def _params(attacks: dict[str, str], through: dict[str, str]) -> list:
    return [pytest.param(a, marks=pytest.mark.xfail(strict=True, reason=through[a])) if a in through else a
            for a in sorted(attacks)]


@pytest.mark.parametrize("mode", ["in_place", "fresh"])
@pytest.mark.parametrize("attack", _params(PATCH_ATTACKS, GETS_THROUGH))
def test_a_spoofing_patch_is_never_resolved(tmp_path: Path, attack: str, mode: str) -> None:
    row = _run(tmp_path, PATCH_ATTACKS[attack], mode)
    assert (row["status"], row["reward"]) == ("unresolved", 0.0), (row["error"], row["error_class"])
    assert row["grading_mode"] == mode and row["tool_calls"] == 1 and row["patch_bytes"] > 0


@pytest.mark.parametrize("attack", _params(IN_PLACE_ATTACKS, IN_PLACE_GETS_THROUGH))
def test_a_spoofing_agent_is_never_resolved_in_place_with_the_defaults(tmp_path: Path, attack: str) -> None:
    # no grade.kill_leftovers override: a patch-graded task gets the protections by default
    row = _run(tmp_path, IN_PLACE_ATTACKS[attack], "in_place")
    assert (row["status"], row["reward"]) == ("unresolved", 0.0), (row["error"], row["error_class"])
    assert row["grading_mode"] == "in_place"


def test_the_honest_fix_resolves_both_ways(tmp_path: Path) -> None:
    # the suite's control: the same task, loop and grader resolve the reference solution
    solve = (TASK / "solution" / "solve.sh").read_text()
    row = _run(tmp_path, "cd /app\n" + solve, "both")
    assert (row["status"], row["fresh_status"], row["tamper_suspect"]) == ("resolved", "resolved", False), row["error"]
