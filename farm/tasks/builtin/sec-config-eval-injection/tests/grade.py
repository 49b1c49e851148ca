"""Hidden grader for a builtin task: restore the hidden test files, run the named tests.

Reads config.json beside this file:
  {"workdir": "/app", "files": {"<name in /tests>": "<path in the repo>"},
   "fail_to_pass": ["tests.test_x.Case.test_y", ...], "pass_to_pass": [...]}
The reward is 1 only if every FAIL_TO_PASS and every PASS_TO_PASS test ran and passed;
a test that is missing, skipped, errors or hangs counts as failed. Each test runs in its own
interpreter so that state one test leaves behind (the kind of bug these tasks are about)
cannot decide another test's outcome.
"""

import json
import os
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LOG_DIR = "/logs/verifier"
PER_TEST_TIMEOUT_S = 30
STATUSES = ("passed", "failed", "skipped", "missing", "error")


def restore_files(workdir: str, files: dict) -> None:
    # The agent may have edited or deleted the visible tests; the hidden versions win.
    for name, dest in files.items():
        target = os.path.join(workdir, dest)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(HERE, name), target)


def run_one(test_id: str) -> str:
    loader = unittest.TestLoader()
    try:
        suite = loader.loadTestsFromName(test_id)
    except Exception as exc:  # a module that no longer imports, a renamed test
        print(f"  cannot load {test_id}: {exc!r}")
        return "error"
    result = unittest.TextTestResult(sys.stdout, descriptions=False, verbosity=0)
    suite.run(result)
    for _, trace in result.errors + result.failures:
        print(trace)
    if result.testsRun != 1 or loader.errors:
        return "missing"
    if result.errors or result.failures:
        return "failed"
    if result.skipped or result.expectedFailures or result.unexpectedSuccesses:
        return "skipped"
    return "passed"


def run_isolated(test_id: str) -> str:
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", test_id],
                              capture_output=True, text=True, timeout=PER_TEST_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"  {test_id} timed out after {PER_TEST_TIMEOUT_S}s")
        return "timeout"
    lines = proc.stdout.strip().splitlines()
    status = lines[-1].removeprefix("status: ") if lines else ""
    if status not in STATUSES or proc.returncode != 0:
        status = "error"
    if status != "passed":
        print((proc.stdout + proc.stderr).rstrip())
    return status


def main() -> int:
    if sys.argv[1:2] == ["--one"]:
        sys.path.insert(0, os.getcwd())
        print(f"status: {run_one(sys.argv[2])}")
        return 0
    with open(os.path.join(HERE, "config.json")) as fh:
        config = json.load(fh)
    workdir = config["workdir"]
    report = {"fail_to_pass": {}, "pass_to_pass": {}}
    try:
        restore_files(workdir, config.get("files", {}))
        os.chdir(workdir)
        for group in ("fail_to_pass", "pass_to_pass"):
            for test_id in config[group]:
                status = run_isolated(test_id)
                report[group][test_id] = status
                print(f"{status.upper():8} {group.upper()} {test_id}", flush=True)
    finally:
        wanted = len(config["fail_to_pass"]) + len(config["pass_to_pass"])
        statuses = [s for g in report.values() for s in g.values()]
        ok = len(statuses) == wanted and all(s == "passed" for s in statuses)
        os.makedirs(LOG_DIR, exist_ok=True)
        with open(os.path.join(LOG_DIR, "report.json"), "w") as fh:
            json.dump(report, fh, indent=2)
        with open(os.path.join(LOG_DIR, "reward.txt"), "w") as fh:
            fh.write("1\n" if ok else "0\n")
        print(f"reward: {int(ok)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
