"""The Harbor verifier protocol, run inside a sandbox.

After the agent: wipe /tests and /logs/verifier, upload the task's tests/ to /tests, run
``bash /tests/test.sh`` in the workdir with the verifier timeout, then read
/logs/verifier/reward.json (a number, ``{"reward": x}`` or a one-key object) or else
reward.txt. Resolved iff reward >= 1. A missing or unparseable reward is an infrastructure
error of the verifier — never a silent 0 (reference/grading.md, harbor-tasks.md §1.4).
"""

from __future__ import annotations

import json
import math
import shlex
import time
from dataclasses import dataclass

from farm.sandbox.base import Sandbox
from farm.tasks.model import Task

VERIFIER_OUTPUT_CAP = 1 << 20


@dataclass
class GradeResult:
    reward: float | None
    resolved: bool
    output: str = ""
    error_class: str | None = None  # set when no valid reward was produced
    error: str | None = None
    duration_s: float = 0.0

    @property
    def valid(self) -> bool:
        return self.error_class is None


class RewardError(ValueError):
    pass


def parse_reward(json_text: str | None, txt_text: str | None) -> float:
    """The reward from reward.json (preferred) or reward.txt; RewardError if neither is valid."""
    if json_text is not None:
        try:
            data = json.loads(json_text)
        except ValueError as exc:
            raise RewardError(f"reward.json is not JSON: {exc}") from None
        if isinstance(data, dict):
            if "reward" in data:
                value = data["reward"]
            elif len(data) == 1:
                value = next(iter(data.values()))
            else:
                raise RewardError(f"reward.json has several keys and no 'reward': {sorted(data)}")
        else:
            value = data
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RewardError(f"reward.json value {value!r} is not a number")
        reward = float(value)
    elif txt_text is not None:
        text = txt_text.strip()
        if not text:
            raise RewardError("reward.txt is empty")
        try:
            reward = float(text)
        except ValueError:
            raise RewardError(f"reward.txt does not hold a number: {text[:80]!r}") from None
    else:
        raise RewardError("the verifier wrote neither /logs/verifier/reward.json nor reward.txt")
    if not math.isfinite(reward):
        raise RewardError(f"reward {reward!r} is not finite")
    if reward < 0:
        raise RewardError(f"reward {reward!r} is negative")
    return reward


async def _read_optional(sandbox: Sandbox, path: str) -> str | None:
    stat = await sandbox.stat(path)
    if not stat.exists or stat.is_dir:
        return None
    return (await sandbox.read_file(path)).decode("utf-8", errors="replace")


async def run_harbor_verifier(task: Task, sandbox: Sandbox) -> GradeResult:
    if task.verifier.tests_dir is None:
        return GradeResult(None, False, error_class="verifier_missing", error="task has no tests/ directory")
    t0 = time.monotonic()
    wd = shlex.quote(task.workdir)
    # Stage agent-created files so verifiers that run `git clean` do not delete them (Leaf does
    # the same); the index is not part of the captured patch, which was taken before.
    prep = (
        # /tests and /logs may be mount points (bubblewrap binds, pod volumes): empty them, do not remove them
        "mkdir -p /tests /logs/verifier && find /tests /logs/verifier -mindepth 1 -delete && "
        f"if git -C {wd} rev-parse --is-inside-work-tree >/dev/null 2>&1; "
        f"then git -C {wd} add -A >/dev/null 2>&1 || true; fi"
    )
    res = await sandbox.exec(prep, timeout_s=120, cwd="/")
    if res.exit_code != 0:
        return GradeResult(None, False, res.output, "verifier_setup", f"preparing /tests failed: {res.output[-500:]}",
                           time.monotonic() - t0)
    await sandbox.upload(task.verifier.tests_dir, "/tests")
    run = await sandbox.exec(
        "bash /tests/test.sh",
        timeout_s=task.verifier_timeout_s,
        cwd=task.workdir,
        env=dict(task.verifier.env) or None,
        merge_stderr=True,
        output_cap=VERIFIER_OUTPUT_CAP,
    )
    output = run.output
    elapsed = time.monotonic() - t0
    if run.timed_out:
        return GradeResult(None, False, output, "verifier_timeout",
                           f"tests/test.sh did not finish within {task.verifier_timeout_s:g}s", elapsed)
    marker = task.verifier.success_marker
    if marker and marker not in output:
        return GradeResult(None, False, output, "verifier_incomplete",
                           f"verifier output lacks the success marker {marker!r}", elapsed)
    try:
        reward = parse_reward(
            await _read_optional(sandbox, "/logs/verifier/reward.json"),
            await _read_optional(sandbox, "/logs/verifier/reward.txt"),
        )
    except RewardError as exc:
        return GradeResult(None, False, output, "verifier_no_reward", str(exc), time.monotonic() - t0)
    return GradeResult(reward, reward >= 1.0, output, None, None, time.monotonic() - t0)
