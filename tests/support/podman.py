"""Real containers under podman as root: the bare Debian task image (no Python of its own), the
toolbox image, a containers.conf, and a ConformanceBackend over sandbox=docker driving podman.

The ``podman_env`` fixture (tests/conftest.py) calls :func:`prepare_podman`; the tests of
tests/sandbox/docker, the image tests of tests/sandbox and tests/agent/test_leaf_differential.py use it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from farm.config import DockerSandboxConfig
from farm.sandbox.base import Sandbox
from farm.sandbox.docker.sandbox import ContainerSandbox
from farm.tasks.model import Task
from tests.support.requirements import require
from tests.support.tasks import make_task

WORK = Path(os.environ.get("FARM_PODMAN_WORKDIR", "/var/tmp/farm-k8s"))
BASE_IMAGE = "localhost/farm-test-base:bookworm"
TOOLBOX_IMAGE = "localhost/farm-toolbox:test"
TOOLBOX_DIR = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "toolbox"
UNPULLABLE = "localhost:1/farm-nope:1"  # nothing listens on port 1: the pull fails in seconds
# podman as root here: runc, and ulimits below the machine's hard limit
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
log_driver = "k8s-file"
[engine]
runtime = "{runtime}"
events_logger = "file"
"""


def run_command(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=env)


def podman(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120)


def remove_images_named(part: str) -> None:
    """Remove every image whose repository:tag contains ``part`` (a test's own built images)."""
    for tag in podman("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split():
        if part in tag:
            podman("rmi", "-f", tag)


def local_tag(task: Task) -> str:
    """The tag podman builds the task under now (its bases as present), from sync or async code."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from farm.sandbox.images.plan import local_build_tag

    with ThreadPoolExecutor(1) as pool:  # a loop of its own: callable inside a running one
        tag = pool.submit(asyncio.run, local_build_tag("podman", task)).result()
    assert tag is not None, f"task {task.task_id} has no Dockerfile"
    return tag


def image_exists(name: str) -> bool:
    return run_command("podman", "image", "exists", name).returncode == 0


def prepare_podman() -> dict[str, str]:
    """podman as root with its containers.conf, the base image and the toolbox image (made once,
    then found); returns podman's environment. Skips, naming what is missing, where it cannot."""
    require("engine", "root")
    runtime = "runc" if shutil.which("runc") else "crun"
    WORK.mkdir(parents=True, exist_ok=True)
    conf = WORK / "containers.conf"
    conf.write_text(CONTAINERS_CONF.format(runtime=runtime))
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    os.environ["CONTAINERS_CONF"] = str(conf)  # ContainerSandbox's engine calls inherit it
    if not image_exists(BASE_IMAGE):
        rootfs = WORK / "rootfs-minbase"
        if not (rootfs / "bin").exists():
            if shutil.which("debootstrap") is None:
                pytest.skip("needs debootstrap (apt-get install debootstrap) to make a base image")
            res = run_command("debootstrap", "--variant=minbase", "bookworm", str(rootfs),
                              "http://deb.debian.org/debian", timeout=900)
            if res.returncode != 0:
                pytest.skip(f"debootstrap failed (no Debian mirror?): {res.stderr[-300:]}")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        res = subprocess.run(["podman", "import", "-", BASE_IMAGE], stdin=tar.stdout, capture_output=True, env=env)
        tar.wait()
        assert res.returncode == 0, res.stderr
    if not image_exists(TOOLBOX_IMAGE):
        res = run_command("podman", "build", "--build-arg", f"BASE={BASE_IMAGE}", "-t", TOOLBOX_IMAGE,
                          str(TOOLBOX_DIR), env=env, timeout=900)
        if res.returncode != 0:
            pytest.skip(f"building the toolbox image failed (no Debian mirror?): {res.stderr[-500:]}")
    assert run_command("podman", "run", "--rm", "--entrypoint", "/bin/sh", BASE_IMAGE, "-c",
                       "command -v python3 || echo none", env=env).stdout.strip() == "none"
    return env


def podman_task(**kw: Any) -> Task:
    """A task on the bare Debian base image."""
    kw.setdefault("image", BASE_IMAGE)
    return make_task(**kw)


class PodmanBackend:
    shares_host_loopback = False

    def __init__(self) -> None:
        self.cfg = DockerSandboxConfig(engine="podman", toolbox_image=TOOLBOX_IMAGE, pull="never")

    def make(self, task: Task, network: str) -> Sandbox:
        return ContainerSandbox(task, self.cfg, run_id="run-podman", trial_key=uuid.uuid4().hex, network=network)  # type: ignore[arg-type]

    async def kill_from_outside(self, sandbox: Sandbox) -> None:
        assert isinstance(sandbox, ContainerSandbox)
        run_command("podman", "kill", sandbox.name)

    def processes(self, sandbox: Sandbox) -> list[Any]:
        assert isinstance(sandbox, ContainerSandbox)
        out = run_command("podman", "top", sandbox.name, "hpid").stdout.split()
        return [int(p) for p in out if p.isdigit()] + [sandbox.name]

    def still_running(self, identities: list[Any]) -> list[Any]:
        left = [p for p in identities if isinstance(p, int) and Path(f"/proc/{p}").exists()]
        name = [n for n in identities if isinstance(n, str)]
        return left + [n for n in name if run_command("podman", "container", "exists", n).returncode == 0]
