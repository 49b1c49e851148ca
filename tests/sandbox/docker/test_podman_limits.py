"""What a container's limits did, as sandbox=docker reads it (podman + runc, cgroup v1 here):
the container's own cgroup counters, found from its init PID once it runs (docker/limits.py).

A memory blow-up in one command meets the container's memory limit; the kernel's OOM killer
takes the command (the largest process), the sandbox agent answers the next call, and the
sandbox says its commands met the memory limit. A fork storm at a small pids limit is counted
the same way. Both answers outlive the container (read before it is removed).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from farm.config import DockerSandboxConfig
from farm.sandbox.docker.sandbox import ContainerSandbox
from tests.support.podman import TOOLBOX_IMAGE, podman_task

pytestmark = pytest.mark.integration

# tail holds its one endless line in memory: it grows until the limit's OOM killer ends it
BLOW_UP = "head -c 1G /dev/zero | tail > /dev/null"
PIDS = 64
STORM = ("for i in 1 2 3 4 5 6 7 8; do setsid bash -c 'while :; do sleep 1000 & done' >/dev/null 2>&1 & done; "
         "sleep 1; echo stormed")


def _sandbox(**cfg: object) -> ContainerSandbox:
    config = DockerSandboxConfig(engine="podman", toolbox_image=TOOLBOX_IMAGE, pull="never", **cfg)  # type: ignore[arg-type]
    return ContainerSandbox(podman_task(), config, run_id="run-podman", trial_key=uuid.uuid4().hex,
                            network="no-network")


@pytest.mark.usefixtures("podman_env")
async def test_a_memory_blow_up_is_the_commands_and_the_sandbox_answers_on(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # conmon 2.1 drops an empty file named "oom" in its working directory
    sb = _sandbox(memory_limit="160Mi")
    await sb.start()
    try:
        before = await sb.limit_events()
        assert before is not None and before.hit() == [], before  # the counters are readable, and zero
        assert "OOM kills 0" in before.evidence, before.evidence
        res = await sb.exec(BLOW_UP, timeout_s=60)
        assert res.exit_code == 137, res.output  # SIGKILL from the OOM killer
        assert (await sb.exec("echo alive")).stdout == "alive\n"  # the agent survived it
        events = await sb.limit_events()
        assert events is not None
        assert (events.commands, events.agent) == (("memory",), ()), events
        assert "cgroup v1" in events.evidence or "cgroup v2" in events.evidence, events.evidence
    finally:
        await sb.close()
    after = await sb.limit_events()  # the container is gone: the reading taken before its removal
    assert after is not None and after.commands == ("memory",), after


@pytest.mark.usefixtures("podman_env")
async def test_a_fork_storm_at_the_pids_limit_is_counted() -> None:
    sb = _sandbox(extra_args=["--pids-limit", str(PIDS)])  # the last --pids-limit given wins
    await sb.start()
    try:
        await sb.exec(STORM, timeout_s=30)
        await sb.kill_leftovers()
        assert (await sb.exec("echo alive")).stdout == "alive\n"
    finally:
        await sb.close()
    events = await sb.limit_events()
    assert events is not None and "pids" in events.commands and events.agent == (), events


@pytest.mark.usefixtures("podman_env")
async def test_a_container_killed_from_outside_names_no_limit() -> None:
    """The engine or an operator ending the container is not the model's: no limit met (the
    counters read at the loss), or, where they went with the container first, cannot tell."""
    from farm.sandbox.base import SandboxLostError
    from tests.support.podman import run_command

    sb = _sandbox()
    await sb.start()
    try:
        run_command("podman", "kill", sb.name)
        with pytest.raises(SandboxLostError):
            await sb.exec("true")
        events = await sb.limit_events()
        assert events is None or (events.hit() == [] and "OOMKilled False" in events.evidence), events
    finally:
        await sb.close()
