"""Verifier-only retry and per-phase network in real bubblewrap sandboxes: a verifier that could
not set itself up is re-run on the agent's work without a second agent run, and a verifier
whose network differs from the agent's runs with its own."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from farm.config import load_config
from farm.run.plan import TrialSpec
from farm.run.rows import retryable
from farm.run.trial import run_trial
from farm.run.workers import PolicyEndpoints
from farm.sandbox.registry import open_sandbox
from farm.store.schema import TrialResult
from farm.tasks.harbor import load_harbor_dir
from tests.support.tasks import make_task_dir as make_task
from tests.support.verifier_cache import ensure_cache

pytestmark = pytest.mark.bwrap

# the oracle's side effect, counted where the verifier can see it: one line per agent run
SOLVE = "echo fixed > /app/answer.txt; echo run >> /app/agent-runs.txt\n"
REWARD = ('if grep -qx fixed /app/answer.txt; then echo 1 > /logs/verifier/reward.txt; '
          'else echo 0 > /logs/verifier/reward.txt; fi\n')


async def _trial(tmp_path: Path, test_sh: str, *overrides: str, on_open: Any = None, toml_edit: Any = None):
    tasks = tmp_path / "tasks"
    d = make_task(tasks, "t", test_sh, solve_sh=SOLVE)
    if toml_edit is not None:
        (d / "task.toml").write_text(toml_edit((d / "task.toml").read_text()))
    (task,) = load_harbor_dir(tasks, "builtin")
    cfg = load_config(["agent=oracle", f"store.uri={tmp_path / 'store'}",
                       f"sandbox.local.root_dir={tmp_path / 'sandboxes'}", *overrides])
    opened: list[tuple[str, str | None]] = []

    def factory(task, section, **kw):  # noqa: ANN001 - open_sandbox's signature
        opened.append((kw.get("role", "agent"), kw.get("network")))
        if on_open is not None:
            on_open(opened)
        return open_sandbox(task, section, **kw)

    endpoints = PolicyEndpoints()
    try:
        base_url, policy = endpoints.base_url(cfg)
        spec = TrialSpec("run", "k" * 64, task.benchmark, task.task_id, 0, "base", "oracle")
        out = await run_trial(spec, task, cfg, 1, base_url=base_url, policy=policy, sandbox_factory=factory)
    finally:
        endpoints.close()
    return out, opened


async def test_in_place_a_transient_setup_failure_is_re_graded_on_the_same_sandbox_once(tmp_path: Path) -> None:
    # the first download fails (the mirror "was down": a mark the verifier leaves in the agent's
    # sandbox, which in-place grading keeps); the retry finds it and runs the tests
    sh = ("#!/bin/bash\nif [ ! -e /root/.mirror-was-down ]; then touch /root/.mirror-was-down\n"
          "  echo \"curl: (7) Failed to connect to mirror.invalid port 443 after 2 ms: Couldn't connect to server\"\n"
          "  echo 0 > /logs/verifier/reward.txt; exit 0; fi\n"
          'echo "agent runs: $(wc -l < /app/agent-runs.txt)"\n' + REWARD)
    out, opened = await _trial(tmp_path, sh)
    row = out.result
    assert (row.status, row.error_class, row.verifier_runs, row.grading_mode) == ("resolved", None, 2, "in_place")
    assert opened == [("agent", None)]  # one sandbox, one agent run
    assert "curl: (7) Failed to connect" in out.artifacts["verifier.txt"].decode()
    assert out.artifacts["verifier-2.txt"].decode() == "agent runs: 1\n"
    assert row.steps == len(out.steps) and row.steps >= 1 and {s.attempt for s in out.steps} == {1}


async def test_retries_exhausted_is_infra_error_verifier_setup_never_unresolved(tmp_path: Path) -> None:
    sh = "#!/bin/bash\nsource $HOME/.local/bin/env\nuvx -p 3.13 -w pytest==8.4.1 pytest /tests\n" + (
        "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    out, opened = await _trial(tmp_path, sh, "grade.verifier_retries=2")
    row = out.result
    assert (row.status, row.error_class, row.verifier_runs, row.reward) == ("infra_error", "verifier_setup", 3, None)
    assert row.error.endswith("line 3: uvx: command not found (verifier ran 3 times)")
    assert sorted(out.artifacts) >= ["patch.diff", "verifier-2.txt", "verifier-3.txt", "verifier.txt"]
    assert opened == [("agent", None)] and not retryable(row)  # nor is the attempt re-run (a second agent run)

    out, _ = await _trial(tmp_path / "none", sh, "grade.verifier_retries=0")
    assert (out.result.error_class, out.result.verifier_runs) == ("verifier_setup", 1)


async def test_fresh_retry_runs_once_the_host_side_mirror_has_the_wheel(tmp_path: Path) -> None:
    """The verifier's tool comes from a host directory the test controls (a copy of the verifier
    cache used as the mirror): it lacks pytest's wheel for the first verifier sandbox and has it
    when the second one is opened — a mirror that was incomplete and then repaired."""
    mirror = tmp_path / "mirror"
    shutil.copytree(ensure_cache(), mirror, copy_function=os.link)
    wheel = mirror / "wheels" / "pytest-8.4.1-py3-none-any.whl"
    held = tmp_path / wheel.name
    wheel.rename(held)

    def repair(opened: list) -> None:
        if [r for r, _ in opened].count("verifier") == 2:
            held.rename(wheel)

    tests_py = ("from pathlib import Path\n\ndef test_answer():\n"
                "    assert Path('/app/answer.txt').read_text() == 'fixed\\n'\n")
    sh = ("#!/bin/bash\ncat > /tmp/test_answer.py <<'EOF'\n" + tests_py + "EOF\n"
          'echo "agent runs: $(wc -l < /app/agent-runs.txt)"\n'
          "source $HOME/.local/bin/env\nuvx -p 3.11 -w pytest==8.4.1 pytest -p no:cacheprovider /tmp/test_answer.py\n"
          "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    out, opened = await _trial(tmp_path, sh, "grade.mode=fresh", f"grade.verifier_cache.dir={mirror}", on_open=repair)
    row = out.result
    assert (row.status, row.verifier_runs, row.grading_mode) == ("resolved", 2, "fresh"), (row.error_class, row.error)
    assert [r for r, _ in opened] == ["agent", "verifier", "verifier"]
    first, second = out.artifacts["verifier.txt"].decode(), out.artifacts["verifier-2.txt"].decode()
    assert "No solution found when resolving" in first and "there is no version of pytest==8.4.1" in first
    assert first.startswith("[farm verifier-cache] staged ")
    # the agent's side effect reached both verifier sandboxes through the patch, from one agent run
    assert "agent runs: 1" in first and "agent runs: 1" in second and "1 passed" in second


async def test_a_verifier_network_the_local_backend_cannot_switch_to_gets_a_fresh_verifier_sandbox(
        tmp_path: Path) -> None:
    if shutil.which("slirp4netns") is None:
        pytest.skip("public sandboxes need slirp4netns")
    # the verifier passes only where it has a network interface besides loopback
    sh = ("#!/bin/bash\ncat /proc/net/dev\nif grep -v -e 'lo:' -e '|' /proc/net/dev | grep -q : && "
          "grep -qx fixed /app/answer.txt; then echo 1 > /logs/verifier/reward.txt; "
          "else echo 0 > /logs/verifier/reward.txt; fi\n")

    def verifier_public(toml: str) -> str:
        head, verifier = toml.split("[verifier]", 1)
        return head + "[verifier]" + verifier.replace('network_mode = "no-network"', 'network_mode = "public"', 1)

    out, opened = await _trial(tmp_path, sh, toml_edit=verifier_public)
    row = out.result
    assert (row.agent_network, row.verifier_network) == ("no-network", "public")
    assert (row.status, row.grading_mode) == ("resolved", "fresh"), out.artifacts.get("verifier.txt")
    assert opened == [("agent", None), ("verifier", "public")]


def _row(error_class: str) -> TrialResult:
    return TrialResult(run_id="r", trial_key="k", benchmark="b", task_id="t", seed=0, arm="a", attempt=1,
                       model=None, status="infra_error", error_class=error_class)


@pytest.mark.parametrize("cls,again", [("sandbox_start:image_build", False), ("sandbox_start:build_step", False),
                                       ("verifier_setup", False),
                                       ("verifier_cache", False),
                                       ("sandbox_start:image_pull", True), ("sandbox_lost", True)])
def test_an_image_build_or_a_verifier_set_up_is_not_retried_at_the_attempt_level(cls: str, again: bool) -> None:
    assert retryable(_row(cls)) is again


ANSWER_PATCH = ("diff --git a/answer.txt b/answer.txt\nnew file mode 100644\n--- /dev/null\n+++ b/answer.txt\n"
                "@@ -0,0 +1 @@\n+fixed\n")


@pytest.mark.parametrize("sh,status,runs", [
    ("#!/bin/bash\n" + REWARD, True, 1),
    ("#!/bin/bash\nuvx -p 3.13 pytest /tests || echo 0 > /logs/verifier/reward.txt\n", False, 3),
])
async def test_grade_patch_grades_fresh_with_the_trials_retries(tmp_path: Path, sh: str, status: bool,
                                                                runs: int) -> None:
    from farm.grade.attempt import grade_patch

    make_task(tmp_path / "tasks", "t", sh, solve_sh=None)
    (task,) = load_harbor_dir(tmp_path / "tasks", "builtin")
    cfg = load_config([f"sandbox.local.root_dir={tmp_path / 'sandboxes'}", "grade.verifier_retries=2"])
    roles: list[str] = []

    def factory(task, section, **kw):  # noqa: ANN001 - open_sandbox's signature
        roles.append(kw["role"])
        return open_sandbox(task, section, run_id="r", trial_key="k", attempt=1, **kw)

    res = await grade_patch(task, cfg, ANSWER_PATCH, factory)
    assert (res.resolved, res.runs) == (status, runs) and roles == ["verifier"] * runs
    if not status:
        assert res.error_class == "verifier_setup" and res.error.endswith("(verifier ran 3 times)")
