"""The run-time path of a SWE-bench row's verifier (``run_harbor_verifier``, protocol ``swebench``)
without an instance image: an in-memory sandbox in which ``tests/test.sh`` leaves a chosen
/logs/verifier/test_output.txt, graded on the host by the package's rules."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from swebench.harness import constants as C

from farm.grade.harbor import run_harbor_verifier
from farm.sandbox.base import ExecResult, StatResult
from farm.tasks import catalog
from farm.tasks.model import Task
from farm.tasks.swebench.load import load_rows
from farm.tasks.swebench.task_dir import TEST_LOG
from tests.shared import shared_path

INSTANCE = "django__django-11603"


class _LogSandbox:
    """Files in a dict; running tests/test.sh writes ``log`` (None: the script wrote nothing)."""

    def __init__(self, log: str | None, *, timed_out: bool = False, files: Mapping[str, str] | None = None) -> None:
        self.log = log
        self.timed_out = timed_out
        self.files: dict[str, bytes] = {k: v.encode() for k, v in (files or {}).items()}
        self.uploaded: dict[str, list[str]] = {}
        self.commands: list[str] = []

    async def exec(self, command: str, timeout_s: float = 120.0, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, merge_stderr: bool = False,
                   output_cap: int | None = None) -> ExecResult:
        self.commands.append(command)
        if command.endswith("bash /tests/test.sh"):
            if self.log is not None:
                self.files[TEST_LOG] = self.log.encode()
            return ExecResult(0, stdout="test.sh ran\n", timed_out=self.timed_out)
        return ExecResult(0)

    async def upload(self, src: Path, dest: str) -> None:
        self.uploaded[dest] = sorted(p.name for p in Path(src).iterdir())

    async def stat(self, path: str) -> StatResult:
        return StatResult(exists=path in self.files, size=len(self.files.get(path, b"")))

    async def read_file(self, path: str) -> bytes:
        return self.files[path]


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    rows = shared_path("fixtures", "swebench-verified", "swebench-verified.jsonl")
    line = next(ln for ln in rows.read_text(encoding="utf-8").splitlines() if f'"{INSTANCE}"' in ln)
    tmp = tmp_path_factory.mktemp("swebench-verifier")
    path = tmp / "rows.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    loaded = load_rows(path, catalog.get_source("swebench_verified"), select=None, repos=None, pythons=None,
                       cache_dir=str(tmp / "cache"))
    assert not loaded.report.failures and len(loaded.tasks) == 1
    return loaded.tasks[0]


def _log(*, fail_first_f2p: bool = False, markers: bool = True) -> str:
    """The excerpt as the package's eval.sh frames it under ``set -x``."""
    text = shared_path("fixtures", "grading", f"log_{INSTANCE}.test_output_excerpt.txt").read_text(encoding="utf-8")
    if fail_first_f2p:
        f2p = "test_distinct_on_aggregate (aggregation.tests.AggregateTestCase)"
        assert f"{f2p} ... ok" in text
        text = text.replace(f"{f2p} ... ok", f"{f2p} ... FAIL")
    if not markers:
        return text
    return f"+ : '{C.START_TEST_OUTPUT}'\n{text}+ : '{C.END_TEST_OUTPUT}'\n+ git checkout abc tests/x.py\n"


async def test_a_log_where_fail_to_pass_passes_is_reward_one(task: Task) -> None:
    assert task.verifier.protocol == "swebench" and task.verifier.success_marker is None
    sb = _LogSandbox(_log())
    res = await run_harbor_verifier(task, sb)  # type: ignore[arg-type]
    assert (res.reward, res.resolved, res.error_class) == (1.0, True, None)
    assert sb.uploaded["/tests"] == ["config.json", "eval.sh", "test.sh"]
    assert "[farm swebench] RESOLVED_FULL (FAIL_TO_PASS 2 passed / 0 failed" in res.output


async def test_a_failing_fail_to_pass_test_is_reward_zero_whatever_reward_file_the_agent_left(task: Task) -> None:
    # the swebench protocol reads only the test log: a reward file in /logs is not the verdict
    sb = _LogSandbox(_log(fail_first_f2p=True), files={"/logs/verifier/reward.txt": "1\n",
                                                       "/logs/verifier/reward.json": json.dumps({"reward": 1})})
    res = await run_harbor_verifier(task, sb)  # type: ignore[arg-type]
    assert (res.reward, res.resolved, res.error_class) == (0.0, False, None)
    assert "RESOLVED_PARTIAL" in res.output


async def test_a_pass_line_after_the_failure_is_reward_zero_and_flagged(task: Task) -> None:
    # what patched code printing at exit leaves: the runner's FAIL, then a pass line of its own
    f2p = "test_distinct_on_aggregate (aggregation.tests.AggregateTestCase)"
    log = _log(fail_first_f2p=True).replace(f"+ : '{C.END_TEST_OUTPUT}'", f"{f2p} ... ok\n+ : '{C.END_TEST_OUTPUT}'")
    res = await run_harbor_verifier(task, _LogSandbox(log))  # type: ignore[arg-type]
    assert (res.reward, res.resolved, res.error_class) == (0.0, False, None)
    assert res.flags == ["test_log@verifier"] and "reports failed and later passed" in res.output
    honest = await run_harbor_verifier(task, _LogSandbox(_log()))  # type: ignore[arg-type]
    assert honest.flags == []


async def test_no_test_log_is_an_infra_error_not_zero(task: Task) -> None:
    res = await run_harbor_verifier(task, _LogSandbox(None))  # type: ignore[arg-type]
    assert (res.reward, res.resolved, res.error_class) == (None, False, "verifier_no_reward")
    assert TEST_LOG in (res.error or "")


async def test_a_log_without_the_markers_is_incomplete_not_unresolved(task: Task) -> None:
    res = await run_harbor_verifier(task, _LogSandbox(_log(markers=False)))  # type: ignore[arg-type]
    assert (res.reward, res.resolved, res.error_class) == (None, False, "verifier_incomplete")
    assert "markers" in (res.error or "") and "[farm swebench] no verdict" in res.output


async def test_a_patch_that_did_not_apply_is_incomplete(task: Task) -> None:
    res = await run_harbor_verifier(task, _LogSandbox(f"{C.APPLY_PATCH_FAIL}\n{_log()}"))  # type: ignore[arg-type]
    assert (res.reward, res.error_class) == (None, "verifier_incomplete")


async def test_a_verifier_timeout_is_not_graded(task: Task) -> None:
    res = await run_harbor_verifier(task, _LogSandbox(_log(), timed_out=True))  # type: ignore[arg-type]
    assert (res.reward, res.resolved, res.error_class) == (None, False, "verifier_timeout")
