"""Real containers: the generated Pod runs under `podman kube play`, and sandbox=docker
(ContainerSandbox, here driving podman) passes the conformance suite.

The task image is a bare Debian rootfs without Python (made with debootstrap and imported
into podman); the toolbox image is built from infra/k8s/toolbox. This proves that the init
container, the shared volume, the relay command and the bundled Python work in a real
container runtime and that task images need no Python of their own.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from farm.config import DockerSandboxConfig, KubernetesSandboxConfig
from farm.sandbox.channel import Channel
from farm.sandbox.docker.sandbox import ContainerSandbox
from farm.sandbox.relayed import manifests as m
from farm.sandbox.relayed.sandbox import INSIDE_SRC
from farm.tasks.model import Task
from tests.support.podman import BASE_IMAGE, TOOLBOX_IMAGE, PodmanBackend, podman_task, run_command

from ..conformance import SandboxConformance

pytestmark = pytest.mark.integration


async def test_kube_play_runs_the_generated_pod(podman_env: dict[str, str], tmp_path: Path) -> None:
    cfg = KubernetesSandboxConfig(namespace="default", toolbox_image=TOOLBOX_IMAGE)
    task = podman_task(workdir="/testbed", env={"FARM_TASK_VAR": "from the manifest"})
    name = m.pod_name("podman", "kube-play", uuid.uuid4().hex)
    pod = m.pod_manifest(task, cfg, name=name, run_id="run-podman", trial_key="k", image=BASE_IMAGE,
                         inside_b64=m.pack_inside(INSIDE_SRC), network="no-network")
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    t0 = time.monotonic()
    res = run_command("podman", "kube", "play", str(path), env=podman_env, timeout=180)
    try:
        assert res.returncode == 0, res.stderr
        proc = await asyncio.create_subprocess_exec(
            "podman", "exec", "-i", f"{name}-{m.TASK_CONTAINER}", m.PYTHON, m.RELAY, "attach", m.socket_name(name),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=podman_env)
        ch = Channel(proc.stdout, proc.stdin, name="kube-play")  # type: ignore[arg-type]
        ch.start()
        pong = await ch.request("ping", timeout=60)
        assert pong["python"].startswith("3.")
        r = await ch.exec('mkdir -p /testbed && cd /testbed && pwd; echo "$FARM_TASK_VAR"; '
                          'command -v python3 || echo no-python; id -u; '
                          'grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status', timeout_s=30)
        lines = r.stdout.splitlines()
        assert lines[:4] == ["/testbed", "from the manifest", "no-python", "0"], r.output
        assert lines[5].split() == ["NoNewPrivs:", "1"]
        caps = int(lines[4].split()[1], 16)
        assert caps & (1 << 13) == 0  # CAP_NET_RAW dropped
        assert caps & (1 << 0)  # CAP_CHOWN kept for root in the image
        await ch.request("shutdown", timeout=10)
        await ch.close()
        print(f"kube play to first answer: {time.monotonic() - t0:.1f} s")
    finally:
        run_command("podman", "kube", "down", str(path), env=podman_env)


class TestPodmanConformance(SandboxConformance):
    @pytest.fixture
    def backend(self, podman_env: dict[str, str]) -> PodmanBackend:
        return PodmanBackend()

    def build_task(self, **kw: Any) -> Task:
        return podman_task(**kw)

    async def test_no_network_blocks_host_loopback(self, make_sandbox, backend) -> None:  # type: ignore[override]
        # the suite's probe needs python3 in the image; this image deliberately has none
        from ..conformance import LoopbackServer

        server = LoopbackServer()
        try:
            sb = await make_sandbox(network="no-network")
            probe = f"exec 3<>/dev/tcp/127.0.0.1/{server.port} && head -c 32 <&3 || echo FAILED"
            r = await sb.exec(probe, timeout_s=20)
            assert "FAILED" in r.stdout and server.token not in r.stdout, r.output
            assert (await sb.exec("ls /sys/class/net")).stdout.split() == ["lo"]
            assert server.accepted == 0
        finally:
            server.close()

    @pytest.mark.skip(reason="a container's root filesystem is the image's own writable layer; read-only "
                      "system directories are a property of the local backend only")
    async def test_system_dirs_are_read_only(self) -> None:  # type: ignore[override]
        pass


# --- farm gc and start-failure reasons on a real engine ---------------------------------------


async def test_gc_removes_what_dead_runs_left_and_keeps_live_ones(podman_env: dict[str, str]) -> None:
    from farm.config import SandboxConfig
    from farm.sandbox.registry import gc

    # a toolbox volume of each sandbox's own: gc removes a dead run's (the shared one it leaves,
    # test_toolbox_volume.py)
    cfg = DockerSandboxConfig(engine="podman", toolbox_image=TOOLBOX_IMAGE, pull="never", keep_containers=True,
                              share_toolbox=False)
    dead_run = f"crashed run/{uuid.uuid4().hex[:6]}"  # not a valid label value on a pod: kept whole here
    sandboxes = {run: ContainerSandbox(podman_task(network="no-network"), cfg, run_id=run, trial_key=uuid.uuid4().hex)
                 for run in (dead_run, "live-run")}
    for sb in sandboxes.values():
        await sb.start()
    await sandboxes[dead_run].close()  # keep_containers: like a driver that died, container and volume stay
    section = SandboxConfig(backend="docker", docker=cfg)
    asked: list[str] = []

    def alive(run_id: str) -> bool:
        asked.append(run_id)
        return run_id != dead_run

    dead, live = sandboxes[dead_run], sandboxes["live-run"]
    try:
        dry = await asyncio.to_thread(gc, section, alive, dry_run=True)
        assert dry.deleted == {"container": [dead.name], "volume": [dead.volume]}
        assert run_command("podman", "container", "exists", dead.name).returncode == 0
        report = await asyncio.to_thread(gc, section, alive)
        assert report.deleted == {"container": [dead.name], "volume": [dead.volume]} and report.dead_runs == {dead_run}
        assert dead_run in asked and report.kept >= 1
        assert run_command("podman", "container", "exists", dead.name).returncode != 0
        assert run_command("podman", "volume", "exists", dead.volume).returncode != 0
        assert run_command("podman", "container", "exists", live.name).returncode == 0
    finally:
        await live.close()
        for sb in sandboxes.values():
            run_command("podman", "rm", "-f", "-t", "0", sb.name)
            run_command("podman", "volume", "rm", "-f", sb.volume)


async def test_an_image_that_cannot_be_pulled_is_a_start_error_with_reason(podman_env: dict[str, str]) -> None:
    from farm.sandbox.base import SandboxStartError

    sb = ContainerSandbox(podman_task(image="localhost/farm-no-such-image:1", network="no-network"),
                          DockerSandboxConfig(engine="podman", toolbox_image=TOOLBOX_IMAGE, pull="never"),
                          run_id="run-podman", trial_key=uuid.uuid4().hex)
    with pytest.raises(SandboxStartError) as e:
        await sb.start()
    assert e.value.reason == "image_pull", e.value
    assert run_command("podman", "container", "exists", sb.name).returncode != 0


# What a command may do under each capability profile: runtime-default is the engine's own set
# (as Harbor runs Terminal-Bench containers: TB2's sshd binds :22 and chroots), restricted the
# file-ownership set; neither ever holds the jail's CAP_SYS_ADMIN.
@pytest.mark.parametrize(("profile", "chroot_ok", "want", "absent"), [
    ("runtime-default", True, {"CAP_SYS_CHROOT": 18, "CAP_NET_BIND_SERVICE": 10, "CAP_SETPCAP": 8},
     {"CAP_SYS_ADMIN": 21}),
    ("restricted", False, {"CAP_CHOWN": 0, "CAP_KILL": 5},
     {"CAP_SYS_ADMIN": 21, "CAP_SYS_CHROOT": 18, "CAP_NET_BIND_SERVICE": 10, "CAP_SETPCAP": 8}),
])
async def test_commands_get_the_capability_profile_and_never_the_jails(
        podman_env: dict[str, str], profile: str, chroot_ok: bool, want: dict[str, int],
        absent: dict[str, int]) -> None:
    cfg = DockerSandboxConfig(engine="podman", toolbox_image=TOOLBOX_IMAGE, pull="never", capabilities=profile)
    sb = ContainerSandbox(podman_task(), cfg, run_id="run-podman", trial_key=uuid.uuid4().hex, network="no-network")
    await sb.start()
    try:
        assert sb.stats.isolation == "pid-namespace+proc"
        eff = int((await sb.exec("grep '^CapEff:' /proc/self/status")).stdout.split()[1], 16)
        bnd = int((await sb.exec("grep '^CapBnd:' /proc/self/status")).stdout.split()[1], 16)
        for name, bit in want.items():
            assert eff >> bit & 1, (profile, name, hex(eff))
        for name, bit in absent.items():
            assert not eff >> bit & 1 and not bnd >> bit & 1, (profile, name, hex(eff), hex(bnd))
        chroot = await sb.exec("chroot / /bin/true")
        assert (chroot.exit_code == 0) is chroot_ok, chroot.output
    finally:
        await sb.close()


async def test_the_container_gets_the_tasks_pids_limit(podman_env: dict[str, str]) -> None:
    # as on sandbox=local: a fork storm meets the task's own wall, not the engine's default
    from farm.tasks.model import Resources

    cfg = DockerSandboxConfig(engine="podman", toolbox_image=TOOLBOX_IMAGE, pull="never")
    sb = ContainerSandbox(podman_task(resources=Resources(pids=300)), cfg, run_id="run-podman",
                          trial_key=uuid.uuid4().hex, network="no-network")
    await sb.start()
    try:
        limit = run_command("podman", "inspect", "-f", "{{.HostConfig.PidsLimit}}", sb.name, env=podman_env)
        assert limit.stdout.strip() == "300", (limit.stdout, limit.stderr)
        assert (await sb.exec("echo ok")).stdout == "ok\n"
    finally:
        await sb.close()
