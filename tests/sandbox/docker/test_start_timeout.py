"""sandbox=docker/podman: the start timeout counts from the task image being present, so a cold
pull or a build (each bounded by its own timeout) does not eat the container's time to answer."""

from __future__ import annotations

import asyncio
import time

import pytest

from farm.config import DockerSandboxConfig
from farm.sandbox.base import SandboxStartError
from farm.sandbox.docker.sandbox import ContainerSandbox
from tests.support.tasks import make_task

PULL_S = 0.6


class _SlowPullNeverAnswers(ContainerSandbox):
    """The real start sequence; the engine calls stand in: the image takes PULL_S to be present,
    then the container never comes up."""

    created_at: float | None = None

    async def _ensure_image(self) -> str:
        await asyncio.sleep(PULL_S)
        return "localhost/farm-test-image:1"

    async def _create(self) -> None:
        self.created_at = time.monotonic()
        await asyncio.sleep(3600)

    async def _destroy(self, force: bool) -> None:
        return None


def test_the_start_timeout_counts_from_the_image_being_present() -> None:
    cfg = DockerSandboxConfig(engine="podman", start_timeout_s=0.4)  # shorter than the pull
    sb = _SlowPullNeverAnswers(make_task(image="debian:12"), cfg, run_id="r", trial_key="k" * 16)
    t0 = time.monotonic()
    with pytest.raises(SandboxStartError) as exc:
        asyncio.run(sb.start())
    waited = time.monotonic() - t0
    assert exc.value.reason == "timeout" and "0.4 s after its image was present" in str(exc.value)
    # the container got its whole 0.4 s after the 0.6 s pull: counted from the start, it would
    # have been cut before the image was even there
    assert sb.created_at is not None and sb.created_at - t0 >= PULL_S
    assert waited >= PULL_S + 0.4
