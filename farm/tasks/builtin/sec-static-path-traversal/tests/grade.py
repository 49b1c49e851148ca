"""Hidden grader for a builtin task: restore the hidden test files, run the named tests.

Reads config.json beside this file:
  {"workdir": "/app", "files": {"<name in /tests>": "<path in the repo>"},
   "fail_to_pass": ["tests.test_x.Case.test_y", ...], "pass_to_pass": [...]}
The reward is 1 only if every FAIL_TO_PASS and every PASS_TO_PASS test ran and passed;
a test that is missing, skipped, errors or hangs counts as failed. Each test runs in its own
forked process so that state one test leaves behind (the kind of bug these tasks are about)
cannot decide another test's outcome. The child reports its status with a token drawn for that
test only, never through its exit code alone: code under test that exits early (os._exit with
any code) reads as an error. reward.json is removed before reward.txt is written, so a file
the code under test left there cannot outrank this grader's reward.
"""

import ctypes
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LOG_DIR = "/logs/verifier"
PER_TEST_TIMEOUT_S = 10
TOTAL_BUDGET_S = 60  # stays below test.sh's timeout, so a hanging fix still gets a report
STATUSES = ("passed", "failed", "skipped", "missing", "error")
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphans of the tests (a daemon that double-forked and called setsid) are re-parented to
    this process instead of escaping, so kill_descendants can end them (Linux >= 3.4)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def kill_descendants() -> None:
    """Kill and reap every process below this one, so nothing the code under test started can
    write the reward after this grader has."""
    me = str(os.getpid())
    for _ in range(100):
        kids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as fh:
                        ppid = fh.read().rsplit(")", 1)[1].split()[1]
                except (OSError, IndexError):
                    continue
                if ppid == me:
                    kids.append(int(entry))
        if not kids:
            return
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    break
            except ChildProcessError:
                break
        time.sleep(0.01)


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


def run_isolated(test_id: str, timeout_s: float) -> str:
    """Run one test in a forked child: a fresh copy of the process, at a fraction of the cost
    of a new interpreter. The child writes "<token> <status>" to a pipe once the test has run."""
    sys.stdout.flush()
    sys.stderr.flush()
    token = secrets.token_hex(16)
    read_end, write_end = os.pipe()
    with tempfile.TemporaryFile() as output:
        pid = os.fork()
        if pid == 0:  # child
            os.close(read_end)
            status = "error"
            try:
                os.setpgid(0, 0)
                os.dup2(output.fileno(), 1)
                os.dup2(output.fileno(), 2)
                sys.path.insert(0, os.getcwd())
                status = run_one(test_id)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                try:
                    os.write(write_end, f"{token} {status}\n".encode())
                finally:
                    os._exit(0)
        os.close(write_end)
        deadline = time.monotonic() + timeout_s
        while True:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(read_end)
                print(f"  {test_id} timed out after {timeout_s:.0f}s")
                return "timeout"
            time.sleep(0.005)
        try:
            os.killpg(pid, signal.SIGKILL)  # whatever the test started is not left running
        except OSError:
            pass
        os.set_blocking(read_end, False)
        try:
            report = os.read(read_end, 4096).decode(errors="replace")
        except BlockingIOError:
            report = ""
        os.close(read_end)
        word = report.split()[1] if report.startswith(token + " ") and len(report.split()) == 2 else ""
        status = word if word in STATUSES else "error"
        if status != "passed":
            output.seek(0)
            print(output.read().decode(errors="replace").rstrip())
        return status


def main() -> int:
    with open(os.path.join(HERE, "config.json")) as fh:
        config = json.load(fh)
    workdir = config["workdir"]
    report = {"fail_to_pass": {}, "pass_to_pass": {}}
    become_subreaper()
    try:
        restore_files(workdir, config.get("files", {}))
        os.chdir(workdir)
        budget_end = time.monotonic() + TOTAL_BUDGET_S
        for group in ("fail_to_pass", "pass_to_pass"):
            for test_id in config[group]:
                remaining = budget_end - time.monotonic()
                status = run_isolated(test_id, min(PER_TEST_TIMEOUT_S, remaining)) if remaining > 0 else "timeout"
                report[group][test_id] = status
                print(f"{status.upper():8} {group.upper()} {test_id}", flush=True)
    finally:
        kill_descendants()
        wanted = len(config["fail_to_pass"]) + len(config["pass_to_pass"])
        statuses = [s for g in report.values() for s in g.values()]
        ok = len(statuses) == wanted and all(s == "passed" for s in statuses)
        os.makedirs(LOG_DIR, exist_ok=True)
        with open(os.path.join(LOG_DIR, "report.json"), "w") as fh:
            json.dump(report, fh, indent=2)
        try:  # the Harbor reader prefers reward.json: only this grader's reward may count
            os.remove(os.path.join(LOG_DIR, "reward.json"))
        except FileNotFoundError:
            pass
        with open(os.path.join(LOG_DIR, "reward.txt"), "w") as fh:
            fh.write("1\n" if ok else "0\n")
        print(f"reward: {int(ok)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
