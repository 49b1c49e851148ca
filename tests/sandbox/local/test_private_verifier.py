"""The in-place verifier's private namespace (inside/verifier_ns.py) in a real bubblewrap
sandbox: a daemon the agent left keeps running and stays reachable, but cannot see or write
the verifier's /tests and /logs/verifier, nor see the verifier's processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.sandbox.local.sandbox import LocalSandbox
from tests.support.tasks import make_task

pytestmark = pytest.mark.bwrap


@pytest.fixture
def sandbox_root(tmp_path: Path) -> Path:
    return tmp_path / "sandboxes"

# the agent's leftover: rewrites the reward and records what it sees of /tests, every 20 ms
DAEMON = ("setsid nohup sh -c 'while true; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
          "ls /tests > /tmp/daemon-saw-tests 2>&1; ps -eo args > /tmp/daemon-saw-procs; sleep 0.02; done' "
          ">/dev/null 2>&1 </dev/null & echo started")


async def test_a_leftover_daemon_cannot_reach_the_private_verifier(sandbox_root: Path, tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("echo from-tests\n")
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        assert sb.capabilities.private_verifier
        assert "started" in (await sb.exec(DAEMON)).stdout
        await sb.exec("mkdir -p /tests /logs/verifier && find /tests /logs/verifier -mindepth 1 -delete")
        await sb.upload(tests, "/tests")
        run = await sb.run_verifier(
            "bash /tests/test.sh; sleep 0.5; cat /logs/verifier/reward.txt 2>&1 || echo no-reward; "
            "pgrep -f 'while true' >/dev/null && echo daemon-visible; echo 0 > /logs/verifier/reward.txt; "
            "echo '{\"tests\": 1}' > /logs/verifier/ctrf.json; echo oops >&2; sleep 0.3",
            timeout_s=30)
        assert run.files is not None, run.why
        out = run.result.stdout
        assert "from-tests" in out and "no-reward" in out and "daemon-visible" in out, out
        assert "oops" in out  # stderr merged into stdout, as the verifier's output
        # the reward is what the verifier wrote, not the daemon's
        assert run.files == {"reward.txt": b"0\n", "ctrf.json": b'{"tests": 1}\n'}
        # the daemon is still alive and never saw the uploaded tests nor the verifier's shell
        left = await sb.exec("pgrep -f 'while true' >/dev/null && echo alive; cat /logs/verifier/reward.txt; "
                             "cat /tmp/daemon-saw-procs")
        assert "alive" in left.stdout
        assert "sleep 0.3" not in left.stdout and "test.sh" not in left.stdout, left.stdout
        # the tests were uploaded where the daemon could see them; the verifier ran its own copy
        assert run.result.exit_code == 0


async def test_a_redirected_results_directory_is_refused(sandbox_root: Path) -> None:
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        await sb.exec("mkdir -p /tests /tmp/fake && rm -rf /logs/verifier && mkdir -p /logs && "
                      "ln -s /tmp/fake /logs/verifier")
        run = await sb.run_verifier("echo ran", timeout_s=30)
        assert run.redirected and run.files == {} and "ran" not in run.result.stdout
        assert "/logs/verifier" in run.why


async def test_a_timed_out_verifier_is_killed_and_says_so(sandbox_root: Path) -> None:
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        await sb.exec("mkdir -p /tests /logs/verifier")
        run = await sb.run_verifier("sleep 30", timeout_s=1)
        assert run.result.timed_out and run.files == {}
        assert (await sb.exec("pgrep -x sleep || echo none")).stdout.strip() == "none"

