"""One filled toolbox volume for every container sandbox of one toolbox image and farm version
(farm/sandbox/docker/toolbox.py, issue 41), on real podman.

Shared means: two sandboxes mount the same volume, filled once; closing one leaves it for the
other; a half-filled one (no marker) is filled again before use; other agent programs get a
volume of their own; `farm gc` never removes it; `share_toolbox=false` keeps one per sandbox.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from farm.config import DockerSandboxConfig, SandboxConfig
from farm.sandbox.docker import toolbox
from farm.sandbox.docker.sandbox import ContainerSandbox
from farm.sandbox.relayed import manifests as m
from farm.sandbox.relayed.sandbox import INSIDE_SRC
from tests.support.podman import TOOLBOX_IMAGE, podman_task, run_command

pytestmark = pytest.mark.integration


def _cfg(**kw: object) -> DockerSandboxConfig:
    return DockerSandboxConfig(engine="podman", toolbox_image=TOOLBOX_IMAGE, pull="never", **kw)  # type: ignore[arg-type]


def _sandbox(run_id: str, **kw: object) -> ContainerSandbox:
    return ContainerSandbox(podman_task(network="no-network"), _cfg(**kw), run_id=run_id, trial_key=uuid.uuid4().hex)


def _fills(calls: list[list[str]]) -> int:
    return sum(1 for c in calls if c[:2] == ["run", "--rm"])


async def test_sandboxes_share_one_filled_volume_and_gc_leaves_it(podman_env: dict[str, str], monkeypatch) -> None:
    from farm.sandbox.registry import gc

    made = []
    fills: list[list[str]] = []
    real = toolbox.engine

    async def counting(binary: str, *args: str, **kw: object) -> str:
        fills.append(list(args))
        return await real(binary, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(toolbox, "engine", counting)
    # the name follows from the toolbox image and the init command (the agent's programs): one
    # left by an earlier run of this test goes first, so that the first start fills it
    image_id = run_command("podman", "image", "inspect", "--format", "{{.Id}}", TOOLBOX_IMAGE).stdout.strip()
    name = toolbox.volume_name(image_id, [m.TOOLBOX_INIT_PYTHON, "-c", m.INIT_SCRIPT, m.pack_inside(INSIDE_SRC)])
    run_command("podman", "volume", "rm", "-f", name)  # -f: with a container an earlier crash left on it
    try:
        first = _sandbox("share-a")
        await first.start()
        made.append(first)
        assert first.volume == name and first._shared_volume and _fills(fills) == 1
        await first.close()
        # a fill that died before its marker: the next start makes it again and fills it
        where = Path(run_command("podman", "volume", "inspect", "--format", "{{.Mountpoint}}", name).stdout.strip())
        (where / toolbox.READY).unlink()
        (where / "left-by-a-dead-fill").write_text("x")
        fills.clear()
        second = _sandbox("share-b")
        await second.start()
        made.append(second)
        where = Path(run_command("podman", "volume", "inspect", "--format", "{{.Mountpoint}}", name).stdout.strip())
        assert second.volume == name and _fills(fills) == 1 and (where / toolbox.READY).exists()
        assert not (where / "left-by-a-dead-fill").exists()
        fills.clear()
        third = _sandbox("share-c")
        await third.start()
        made.append(third)
        assert third.volume == name and _fills(fills) == 0  # filled already: mounted as it is
        await third.close()
        assert (await second.exec("/.farm/python/bin/python3 -c 'print(7)'")).stdout == "7\n"  # still there
        report = await asyncio.to_thread(gc, SandboxConfig(backend="docker", docker=_cfg()), lambda run: False,
                                         dry_run=True)
        assert name not in report.deleted.get("volume", [])  # not a sandbox's: gc leaves it
    finally:
        for sb in made:
            await sb.close()
    assert run_command("podman", "volume", "exists", name).returncode == 0


async def test_other_agent_programs_get_their_own_volume_and_sharing_can_be_off(podman_env: dict[str, str]) -> None:
    image_id = run_command("podman", "image", "inspect", "--format", "{{.Id}}", TOOLBOX_IMAGE).stdout.strip()
    assert toolbox.volume_name(image_id, ["python", "-c", "a"]) != toolbox.volume_name(image_id, ["python", "-c", "b"])
    assert toolbox.volume_name(image_id, ["x"]) != toolbox.volume_name("sha256:other", ["x"])
    own = _sandbox("share-off", share_toolbox=False)
    await own.start()
    try:
        assert own.volume == f"{own.name}-farm" and not own._shared_volume
    finally:
        await own.close()
    assert run_command("podman", "volume", "exists", own.volume).returncode != 0  # removed with its sandbox
