"""The Harbor verifier protocol end to end in a real bubblewrap sandbox (docs/grading.md)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from farm.grade.harbor import GradeResult, run_harbor_verifier
from farm.sandbox.base import ExecResult
from farm.sandbox.local.sandbox import LocalSandbox
from farm.tasks.model import Environment, Task, VerifierSpec

pytestmark = pytest.mark.bwrap

MARKER = "RESULTS END HERE"


def _task(tmp_path: Path, test_sh: str | None, *, marker: str | None = None, timeout_s: float = 30.0,
          env: dict[str, str] | None = None) -> Task:
    tests_dir = None
    if test_sh is not None:
        tests_dir = tmp_path / "tests"
        tests_dir.mkdir(exist_ok=True)
        (tests_dir / "test.sh").write_text(test_sh)
        (tests_dir / "helper.txt").write_text("uploaded\n")
    return Task(
        benchmark="grade", task_id="t", instruction="", environment=Environment(workdir="/app"),
        verifier=VerifierSpec(tests_dir=tests_dir, success_marker=marker, env=env or {}),
        verifier_timeout_s=timeout_s, agent_network="no-network", verifier_network="no-network",
    )


async def _grade(tmp_path: Path, task: Task, before: str | None = None) -> GradeResult:
    sb = LocalSandbox(task, root_dir=tmp_path / "sb")
    await sb.start()
    try:
        if before:
            assert (await sb.exec(before, cwd="/")).exit_code == 0
        res = await run_harbor_verifier(task, sb)
    finally:
        await sb.close()
    assert 0 < res.duration_s < 120
    return res


async def test_reward_one_is_resolved_and_the_verifier_runs_in_the_workdir(tmp_path: Path) -> None:
    sh = "pwd; cat /tests/helper.txt; echo 1 > /logs/verifier/reward.txt\n"
    res = await _grade(tmp_path, _task(tmp_path, sh))
    assert (res.reward, res.resolved, res.error_class, res.valid) == (1.0, True, None, True)
    assert res.output == "/app\nuploaded\n" and res.duration_s > 0


@pytest.mark.parametrize("reward", ["0.5", "0.999", "0"])
async def test_a_partial_reward_is_not_resolved(tmp_path: Path, reward: str) -> None:
    res = await _grade(tmp_path, _task(tmp_path, f"echo {reward} > /logs/verifier/reward.txt\n"))
    assert res.valid and res.reward == float(reward) and res.resolved is False


async def test_a_reward_above_one_is_resolved(tmp_path: Path) -> None:
    res = await _grade(tmp_path, _task(tmp_path, 'echo \'{"reward": 2}\' > /logs/verifier/reward.json\n'))
    assert res.valid and res.reward == 2.0 and res.resolved is True


async def test_reward_json_wins_over_reward_txt_and_a_directory_is_no_reward_file(tmp_path: Path) -> None:
    sh = 'echo \'{"reward": 0.25}\' > /logs/verifier/reward.json; echo 1 > /logs/verifier/reward.txt\n'
    res = await _grade(tmp_path, _task(tmp_path, sh))
    assert (res.reward, res.resolved) == (0.25, False)
    sh = "mkdir /logs/verifier/reward.json; echo 1 > /logs/verifier/reward.txt\n"
    res = await _grade(tmp_path, _task(tmp_path, sh))
    assert (res.reward, res.resolved, res.error_class) == (1.0, True, None)


async def test_missing_success_marker_is_an_incomplete_verifier_even_with_reward_one(tmp_path: Path) -> None:
    sh = "echo tests ran; echo 1 > /logs/verifier/reward.txt\n"
    res = await _grade(tmp_path, _task(tmp_path, sh, marker=MARKER))
    assert res.resolved is False and res.reward is None and not res.valid
    assert res.error == f"verifier output lacks the success marker {MARKER!r}"
    assert res.output == "tests ran\n"


async def test_success_marker_present_grades_normally(tmp_path: Path) -> None:
    sh = f"echo '{MARKER}' >&2; echo 1 > /logs/verifier/reward.txt\n"  # stderr is merged into the output
    res = await _grade(tmp_path, _task(tmp_path, sh, marker=MARKER))
    assert (res.reward, res.resolved, res.error_class) == (1.0, True, None)


async def test_no_reward_file_is_an_error_not_zero(tmp_path: Path) -> None:
    res = await _grade(tmp_path, _task(tmp_path, "echo no reward\n"))
    assert (res.reward, res.resolved, res.error_class) == (None, False, "verifier_no_reward")
    assert res.error == "the verifier wrote neither /logs/verifier/reward.json nor reward.txt"
    assert res.output == "no reward\n"


async def test_verifier_timeout(tmp_path: Path) -> None:
    res = await _grade(tmp_path, _task(tmp_path, "echo 1 > /logs/verifier/reward.txt; sleep 20\n", timeout_s=0.5))
    assert (res.reward, res.resolved, res.error_class) == (None, False, "verifier_timeout")
    assert res.error == "tests/test.sh did not finish within 0.5s" and res.output == ""


async def test_stale_tests_and_logs_are_wiped_before_the_run(tmp_path: Path) -> None:
    # a reward left behind by the agent must not be read; old files in /tests are gone
    before = "mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && touch /tests/stale"
    res = await _grade(tmp_path, _task(tmp_path, "ls /tests\n"), before=before)
    assert res.error_class == "verifier_no_reward"
    assert res.output == "helper.txt\ntest.sh\n"


async def test_stderr_is_merged_in_order(tmp_path: Path) -> None:
    sh = "echo a; echo b >&2; echo c; echo 1 > /logs/verifier/reward.txt\n"
    res = await _grade(tmp_path, _task(tmp_path, sh))
    assert res.output == "a\nb\nc\n"


async def test_verifier_env_reaches_the_script(tmp_path: Path) -> None:
    sh = 'echo "$GRADE_VAR"; echo 1 > /logs/verifier/reward.txt\n'
    res = await _grade(tmp_path, _task(tmp_path, sh, env={"GRADE_VAR": "from-task"}))
    assert res.output == "from-task\n" and res.resolved


async def test_agent_files_are_staged_so_git_clean_keeps_them(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    before = ("cd /app && git init -q . && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m init "
              "&& echo new > agent_file.txt")
    sh = "git clean -fdq; cat agent_file.txt; echo 1 > /logs/verifier/reward.txt\n"
    res = await _grade(tmp_path, _task(tmp_path, sh), before=before)
    assert res.output == "new\n" and res.resolved


async def test_a_task_without_tests_is_a_missing_verifier(tmp_path: Path) -> None:
    task = _task(tmp_path, None)
    res = await run_harbor_verifier(task, None)  # type: ignore[arg-type]  # never touches the sandbox
    assert (res.reward, res.resolved, res.error_class) == (None, False, "verifier_missing")
    assert (res.error, res.output, res.duration_s) == ("task has no tests/ directory", "", 0.0)


class _PrepFails(LocalSandbox):
    """Fault injection for the one error path no real sandbox state reaches any more (a file or
    symlink at the verifier's paths is now removed, see the next test): the preparation command
    answers as a full disk would."""

    async def exec(self, command: str, **kw):  # type: ignore[override]
        if "find /tests /logs/verifier" in command:
            return ExecResult(1, "", "find: cannot delete '/logs/verifier/x': No space left on device\n", False, 0.0)
        return await super().exec(command, **kw)


async def test_failed_preparation_is_a_setup_error(tmp_path: Path) -> None:
    task = _task(tmp_path, "echo 1 > /logs/verifier/reward.txt\n")
    sb = _PrepFails(task, root_dir=tmp_path / "sb")
    await sb.start()
    try:
        res = await run_harbor_verifier(task, sb)
    finally:
        await sb.close()
    assert (res.reward, res.resolved, res.error_class) == (None, False, "verifier_setup")
    assert res.error.startswith("preparing /tests failed: ") and "No space left on device" in res.error
    assert res.error.endswith(res.output[-500:])


async def test_a_file_or_symlink_the_agent_put_at_the_verifier_paths_is_replaced_not_followed(tmp_path: Path) -> None:
    task = _task(tmp_path, "cat /tests/helper.txt; echo 1 > /logs/verifier/reward.txt\n")
    res = await _grade(tmp_path, task, before="mkdir -p /logs /tmp/elsewhere && rm -rf /logs/verifier && "
                                             "echo x > /logs/verifier && ln -sfn /tmp/elsewhere /tmp/x")
    assert (res.reward, res.error_class) == (1.0, None) and "uploaded" in res.output


def test_grade_result_validity() -> None:
    assert GradeResult(1.0, True).valid
    assert not dataclasses.replace(GradeResult(None, False), error_class="verifier_timeout").valid


async def test_a_daemon_the_agent_left_neither_writes_the_reward_nor_sees_the_verifiers_files(tmp_path: Path) -> None:
    # the verifier's /logs/verifier is private to it (inside/verifier_ns.py); the daemon keeps running
    daemon = ("setsid nohup sh -c 'while true; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
              "sleep 0.02; done' >/dev/null 2>&1 </dev/null &")
    sh = ("sleep 0.5; cat /logs/verifier/reward.txt 2>/dev/null || echo none-yet; "
          "pgrep -f 'while true' >/dev/null && echo daemon-alive; echo 0 > /logs/verifier/reward.txt; sleep 0.5\n")
    res = await _grade(tmp_path, _task(tmp_path, sh), before=daemon)
    assert (res.reward, res.resolved, res.valid) == (0.0, False, True)
    assert res.output == "none-yet\ndaemon-alive\n"
