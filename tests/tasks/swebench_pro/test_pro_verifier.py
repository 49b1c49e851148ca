"""A SWE-bench Pro row through farm's whole grading path, on a repository the test makes: the rows
file and a scripts folder (run_script.sh and parser.py shaped like the official Python ones) load
as a task through the config, its tests/test.sh and solution/solve.sh run for real (on the host,
their /app, /tests and /logs paths mapped into a temporary folder), and ``run_harbor_verifier``
grades the logs with the instance's parser: the gold patch resolves, no patch does not, and an
agent that edits the tests cannot keep the official test files from coming back."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from farm.config import NOT_HASHED, load_config
from farm.errors import ConfigError, TaskFormatError
from farm.grade.harbor import run_harbor_verifier
from farm.sandbox.base import ExecResult, StatResult
from farm.tasks.benchmark import load_benchmark_report
from farm.tasks.model import Task
from tests.support.swebench_pro_instance import PARSER
from tests.support.swebench_pro_instance import commit as _commit
from tests.support.swebench_pro_instance import git as _git
from tests.tasks.swebench_pro.test_pro_rows import raw_row

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
FIXED = BUGGY.replace("return a - b\n\n\ndef sub", "return a + b\n\n\ndef sub")
TESTS_BASE = "from calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n"
TESTS_FIX = "from calc import add, sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n\n\ndef test_add():\n" \
            "    assert add(1, 2) == 3\n"
# shaped like the official Python run scripts: the selected files arrive comma-joined in one argument
RUN_SCRIPT = """#!/bin/bash
set -e
IFS=',' read -r -a TEST_FILES <<< "$1"
for f in "${TEST_FILES[@]}"; do
  python -m pytest "$f" -v --tb=short -p no:cacheprovider || true
done
"""
class _HostSandbox:
    """The sandbox's /app, /tests and /logs/verifier as folders of ``root``; scripts run with bash."""

    def __init__(self, root: Path, repo: Path) -> None:
        self.app, self.tests, self.logs = repo, root / "tests", root / "logs" / "verifier"
        self.path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"

    def _map(self, text: str) -> str:
        where = {"/app": str(self.app), "/tests/": f"{self.tests}/", "/logs/verifier": str(self.logs)}
        return re.sub(r"/logs/verifier|/tests/|/app\b", lambda m: where[m.group(0)], text)

    def run_script(self, script: Path) -> subprocess.CompletedProcess[str]:
        env = {"PATH": self.path, "HOME": str(self.app.parent), "GIT_CONFIG_NOSYSTEM": "1"}
        return subprocess.run(["bash", "-c", self._map(script.read_text())], capture_output=True, text=True,
                              env=env, timeout=300)

    async def exec(self, command: str, timeout_s: float = 120.0, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, merge_stderr: bool = False,
                   output_cap: int | None = None) -> ExecResult:
        if command.endswith("bash /tests/test.sh"):
            res = self.run_script(self.tests / "test.sh")
            return ExecResult(res.returncode, stdout=res.stdout + res.stderr)
        return ExecResult(0)  # the preparation of /tests and /logs: done by upload below

    async def upload(self, src: Path, dest: str) -> None:
        assert dest == "/tests"
        shutil.rmtree(self.tests, ignore_errors=True)
        shutil.copytree(src, self.tests)
        shutil.rmtree(self.logs, ignore_errors=True)
        self.logs.mkdir(parents=True)

    def _host(self, path: str) -> Path:
        return Path(self._map(path))

    async def stat(self, path: str) -> StatResult:
        p = self._host(path)
        return StatResult(exists=p.exists(), is_dir=p.is_dir(), size=p.stat().st_size if p.is_file() else 0)

    async def read_file(self, path: str) -> bytes:
        return self._host(path).read_bytes()


@pytest.fixture
def world(tmp_path: Path) -> dict:
    repo = tmp_path / "app"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    base = _commit(repo, {"calc.py": BUGGY, "tests/test_calc.py": TESTS_BASE}, "base")
    fix = _commit(repo, {"calc.py": FIXED, "tests/test_calc.py": TESTS_FIX}, "fix")
    patch = _git(repo, "diff", base, fix, "--", "calc.py")
    test_patch = _git(repo, "diff", base, fix, "--", "tests")
    _git(repo, "checkout", "-q", base)
    iid = f"instance_acme__calc-{fix}-vnan"
    row = raw_row(instance_id=iid, repo="acme/calc", base_commit=base, patch=patch, test_patch=test_patch,
                  problem_statement="add() subtracts", dockerhub_tag="acme.calc-x",
                  fail_to_pass="['tests/test_calc.py::test_add']", pass_to_pass='["tests/test_calc.py::test_sub"]',
                  before_repo_set_cmd=f"git reset --hard {base}\ngit clean -fd \ngit checkout {base} \n"
                                      f"git checkout {fix} -- tests/test_calc.py",
                  selected_test_files_to_run="['tests/test_calc.py']")
    rows = tmp_path / "pro.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    scripts = tmp_path / "scripts" / iid
    scripts.mkdir(parents=True)
    (scripts / "run_script.sh").write_text(RUN_SCRIPT)
    (scripts / "parser.py").write_text(PARSER)
    return {"repo": repo, "rows": rows, "scripts": scripts.parent, "iid": iid, "root": tmp_path, "row": row}


def _load(world: dict, *extra: str) -> list[Task]:
    cfg = load_config(["benchmark=swebench-pro", f"benchmark.path={world['rows']}",
                       f"benchmark.cache_dir={world['root'] / 'cache'}", *extra])
    return load_benchmark_report(cfg.benchmark).tasks


def _task(world: dict) -> Task:
    tasks = _load(world, f"benchmark.pro_scripts={world['scripts']}")
    assert len(tasks) == 1
    return tasks[0]


def test_the_row_loads_as_a_pro_task_through_the_config(world: dict) -> None:
    task = _task(world)
    assert (task.benchmark, task.task_id) == ("swebench_pro", world["iid"])
    assert task.verifier.protocol == "swebench_pro" and task.verifier_network == "no-network"
    assert task.instruction.startswith("add() subtracts\n\nRequirements:")
    assert task.environment.workdir == "/app"
    assert task.environment.dockerfile is not None
    assert task.environment.dockerfile.read_text().splitlines()[0] == "FROM jefzda/sweap-images:acme.calc-x"
    assert task.metadata["swebench_pro"]["fail_to_pass"] == ["tests/test_calc.py::test_add"]
    assert (task.verifier.tests_dir / "parser.py").read_text() == PARSER  # type: ignore[operator]
    assert "benchmark.pro_scripts" in NOT_HASHED


async def test_the_gold_patch_resolves(world: dict) -> None:
    task = _task(world)
    sb = _HostSandbox(world["root"], world["repo"])
    assert task.solution_dir is not None
    assert sb.run_script(task.solution_dir / "solve.sh").returncode == 0
    res = await run_harbor_verifier(task, sb)  # type: ignore[arg-type]
    assert (res.reward, res.resolved, res.error_class) == (1.0, True, None), res.output
    assert "[farm swebench-pro] resolved; 2 test statuses parsed" in res.output


async def test_no_patch_is_unresolved_and_names_the_failing_test(world: dict) -> None:
    res = await run_harbor_verifier(_task(world), _HostSandbox(world["root"], world["repo"]))  # type: ignore[arg-type]
    assert (res.reward, res.resolved, res.error_class) == (0.0, False, None), res.output
    assert "1 required test(s) not PASSED: tests/test_calc.py::test_add" in res.output


async def test_the_official_test_files_come_back_whatever_the_agent_wrote(world: dict) -> None:
    # an agent that deletes the failing test and fakes a reward file gains nothing: the last set-up
    # line restores the test file from the fix commit, and only the parser's statuses count
    (world["repo"] / "tests" / "test_calc.py").write_text(TESTS_BASE)
    sb = _HostSandbox(world["root"], world["repo"])
    task = _task(world)
    res = await run_harbor_verifier(task, sb)  # type: ignore[arg-type]
    assert res.reward == 0.0 and "test_add" in res.output


async def test_a_run_script_that_never_wrote_its_exit_status_is_no_verdict(world: dict) -> None:
    task = _task(world)
    sb = _HostSandbox(world["root"], world["repo"])
    real_upload = sb.upload

    async def upload(src: Path, dest: str) -> None:
        await real_upload(src, dest)
        (sb.tests / "test.sh").write_text("#!/bin/bash\necho the sandbox died\n")

    sb.upload = upload  # type: ignore[method-assign]
    res = await run_harbor_verifier(task, sb)  # type: ignore[arg-type]
    assert (res.reward, res.error_class) == (None, "verifier_incomplete")
    assert "did not run it to the end" in (res.error or "")


def test_pro_rows_without_the_scripts_key_are_refused_by_name(world: dict) -> None:
    with pytest.raises(ConfigError, match="'benchmark.pro_scripts' is required"):
        _load(world)
    with pytest.raises(ConfigError, match=r"invalid value .* for 'benchmark.pro_scripts': not a directory"):
        _load(world, f"benchmark.pro_scripts={world['root'] / 'nowhere'}")


def test_the_scripts_key_on_a_run_without_swebench_pro_is_refused(world: dict) -> None:
    with pytest.raises(ConfigError, match=r"'benchmark.pro_scripts': read only with benchmark=swebench-pro"):
        load_config(["benchmark=swebench-verified", f"benchmark.pro_scripts={world['scripts']}"])


def test_an_instance_without_scripts_fails_to_load_alone_and_named(world: dict) -> None:
    other = world["scripts"] / "instance_acme__calc-other"
    other.mkdir()
    (other / "parser.py").write_text(PARSER)
    shutil.rmtree(world["scripts"] / world["iid"])
    cfg = load_config(["benchmark=swebench-pro", f"benchmark.path={world['rows']}",
                       f"benchmark.pro_scripts={world['scripts']}", f"benchmark.cache_dir={world['root'] / 'c'}"])
    report = load_benchmark_report(cfg.benchmark).report
    assert [f.task for f in report.failures] == [world["iid"]]
    assert f"no {world['iid']}/run_script.sh" in report.failures[0].message


def test_a_pro_rows_file_under_another_benchmark_is_refused(world: dict) -> None:
    cfg = load_config(["benchmark=swebench-verified", f"benchmark.path={world['rows']}"])
    with pytest.raises(TaskFormatError, match="row 1: missing field 'version'"):
        load_benchmark_report(cfg.benchmark)


# The fix commit the last set-up line names is absent from farm's stand-ins (a one-commit clone of
# the base commit, no gold source in the image): test.sh makes its test files from test_patch.

def _one_commit_clone(world: dict, name: str = "standin") -> Path:
    """``world``'s repository as a stand-in holds it: the base commit alone, shallow."""
    base = world["row"]["base_commit"]
    clone = world["root"] / name
    _git(world["root"], "init", "-q", "-b", "main", str(clone))
    _git(clone, "fetch", "-q", "--depth=1", "--upload-pack=git -c uploadpack.allowAnySHA1InWant=true upload-pack",
         f"file://{world['repo']}", base)
    _git(clone, "reset", "-q", "--hard", base)
    fix = world["iid"].split("-")[1]
    assert subprocess.run(["git", "-C", str(clone), "cat-file", "-e", f"{fix}^{{commit}}"]).returncode != 0
    return clone


async def test_without_the_fix_commit_gold_resolves_and_no_patch_does_not(world: dict) -> None:
    clone = _one_commit_clone(world)
    task = _task(world)
    empty = await run_harbor_verifier(task, _HostSandbox(world["root"], clone))  # type: ignore[arg-type]
    assert (empty.reward, empty.error_class) == (0.0, None), empty.output
    assert "not PASSED: tests/test_calc.py::test_add" in empty.output  # the fix's new test was there, and failed
    # a second clone, as a trial gets a fresh sandbox: in the same tree, the empty run's bytecode of
    # calc.py (same size, same second) would be taken for the patched file's
    clone = _one_commit_clone(world, "standin-gold")
    sb = _HostSandbox(world["root"], clone)
    assert task.solution_dir is not None and sb.run_script(task.solution_dir / "solve.sh").returncode == 0
    gold = await run_harbor_verifier(task, sb)  # type: ignore[arg-type]
    assert (gold.reward, gold.resolved) == (1.0, True), gold.output
    assert (clone / "tests" / "test_calc.py").read_text() == TESTS_FIX


async def test_a_replace_ref_or_config_the_agent_left_cannot_stand_in_for_the_fix(world: dict) -> None:
    # the agent plants its own "fix" commit (a test file whose test_add passes whatever add does)
    # under the fix's name, and tells git to ignore replace refs; the official tests still come back
    clone = _one_commit_clone(world)
    fix = world["iid"].split("-")[1]
    fake = TESTS_FIX.replace("assert add(1, 2) == 3", "assert True")
    (clone / "tests" / "test_calc.py").write_text(fake)
    _git(clone, "add", "-A")
    _git(clone, "commit", "-qm", "fake")
    _git(clone, "update-ref", f"refs/replace/{fix}", "HEAD")
    _git(clone, "reset", "-q", "--hard", "HEAD~1")
    _git(clone, "config", "core.useReplaceRefs", "false")
    (clone / "tests" / "test_calc.py").write_text(fake)  # and leaves it in the work tree
    res = await run_harbor_verifier(_task(world), _HostSandbox(world["root"], clone))  # type: ignore[arg-type]
    assert res.reward == 0.0 and "test_add" in res.output, res.output
    assert (clone / "tests" / "test_calc.py").read_text() == TESTS_FIX


async def test_where_the_fix_commit_is_present_nothing_is_made_and_a_planted_replacement_is_dropped(
        world: dict) -> None:
    # an upstream image holds the fix commit; an agent's replace ref for it would swap in its tests
    repo, fix = world["repo"], world["iid"].split("-")[1]
    fake = TESTS_FIX.replace("assert add(1, 2) == 3", "assert True")
    (repo / "tests" / "test_calc.py").write_text(fake)
    _git(repo, "commit", "-qam", "fake")
    _git(repo, "update-ref", f"refs/replace/{fix}", "HEAD")
    _git(repo, "reset", "-q", "--hard", "HEAD~1")
    res = await run_harbor_verifier(_task(world), _HostSandbox(world["root"], repo))  # type: ignore[arg-type]
    assert res.reward == 0.0 and "test_add" in res.output, res.output
    assert _git(repo, "for-each-ref", "refs/replace/") == ""
