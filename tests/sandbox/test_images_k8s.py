"""A cluster runs the builds `farm images build --push REGISTRY` made, named by content hash.

Through the thin API-server fakes of tests/sandbox/kubernetes/fake_cluster.py (nothing real can stand in for
a Kubernetes API server here): the pod the backend creates is inspected, and its start proves
the build steps were not replayed (the Dockerfile's RUN would fail if they were).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from farm.config import KubernetesSandboxConfig, SandboxConfig
from farm.errors import UnsupportedTaskError
from farm.sandbox.images.plan import task_build_tag
from farm.sandbox.kubernetes.sandbox import BACKEND, KubernetesSandbox
from farm.tasks.model import Task
from tests.support.images import harbor_task

from .kubernetes.fake_cluster import FakeCoreV1Api, FakeExecStream, FakeNetworkingV1Api

REGISTRY = "registry.example.com:5000/farm"
# fails if replayed: a pod that starts proves the image was trusted to hold the build
DOCKERFILE = "FROM debian:bookworm\nRUN exit 9\nWORKDIR /srv/site\n"


async def _start(root: Path, task: Task, policy: str, **cfg: str) -> tuple[KubernetesSandbox, dict]:
    net = FakeNetworkingV1Api()
    core = FakeCoreV1Api(root / "cluster", net)
    conf = KubernetesSandboxConfig(namespace="farm-test", toolbox_image="farm-toolbox:test", **cfg)  # type: ignore[arg-type]
    sb = KubernetesSandbox(task, conf, run_id="run-images", trial_key=os.urandom(8).hex(), core_api=core,
                           net_api=net, exec_opener=FakeExecStream(core), poll_s=0.05, image_policy=policy)
    await sb.start()
    return sb, core.pods[("farm-test", sb.name)].body


@pytest.mark.bwrap
@pytest.mark.root
@pytest.mark.tools("nsenter")
async def test_pods_run_the_registry_build_and_replay_nothing(tmp_path: Path) -> None:
    task = harbor_task(tmp_path, DOCKERFILE, docker_image="org/prebuilt:1")
    sb, pod = await _start(tmp_path, task, "pull-or-build", build_registry=REGISTRY)
    try:
        tag = task_build_tag(task, REGISTRY)
        assert tag is not None and tag.startswith(f"{REGISTRY}/farm-task/bench-t:")
        assert pod["spec"]["containers"][0]["image"] == sb.image == tag
        assert sb.stats.image is not None and sb.stats.image.source == "cached"
        assert sb.workdir == "/srv/site"
    finally:
        await sb.close()
    # without a registry a cluster runs the named image, as before
    sb, pod = await _start(tmp_path / "b", task, "pull-or-build")
    try:
        assert pod["spec"]["containers"][0]["image"] == "org/prebuilt:1" and sb.stats.image is None
    finally:
        await sb.close()


def test_preflight_accepts_a_multi_stage_task_only_through_the_registry(tmp_path: Path) -> None:
    task = harbor_task(tmp_path, "FROM debian:bookworm AS b\nRUN make\nFROM debian:bookworm\n"
                       "COPY --from=b /out /app/out\n")
    with pytest.raises(UnsupportedTaskError) as e:
        BACKEND.check_task(task, SandboxConfig(backend="kubernetes"))
    assert e.value.reason == "dockerfile_instruction" and "COPY --from=b" in str(e.value)
    registry = SandboxConfig(backend="kubernetes", kubernetes=KubernetesSandboxConfig(build_registry=REGISTRY))
    BACKEND.check_task(task, registry)
    with pytest.raises(UnsupportedTaskError):  # pull never builds
        BACKEND.check_task(task, SandboxConfig(backend="kubernetes", image_policy="pull",
                                               kubernetes=KubernetesSandboxConfig(build_registry=REGISTRY)))
