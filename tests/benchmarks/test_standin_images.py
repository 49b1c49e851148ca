"""`make images`: stand-ins for every base image the Terminal-Bench 2.0 Dockerfiles name,
found by a `podman build --pull=never` of the Dockerfiles as they are, marked as stand-ins."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.shared import shared_path

from .standin import SCRIPT, ensure_standins

FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)", re.I | re.M)
COPY_FROM = re.compile(r"^COPY\s+--from=(\S+)", re.I | re.M)
STAGE = re.compile(r"^FROM\s+\S+\s+AS\s+(\S+)", re.I | re.M)


def _listed() -> dict[str, str]:
    res = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, check=True)
    return {line.split("\t")[0]: line.split("\t")[2] for line in res.stdout.splitlines()}


def test_every_tb2_base_image_has_a_standin_with_its_differences():
    tb2 = shared_path("fixtures", "terminal-bench-2.0")
    bases = {m for f in tb2.glob("*/environment/Dockerfile") for m in FROM.findall(f.read_text())}
    assert len(bases) >= 7, bases
    listed = _listed()
    assert {f"docker.io/library/{b}" for b in bases} <= set(listed), sorted(bases)
    # images a Dockerfile copies files out of (not its own stages) are stood in for too
    copied = set()
    for f in tb2.glob("*/environment/Dockerfile"):
        text = f.read_text()
        copied |= set(COPY_FROM.findall(text)) - set(STAGE.findall(text))
    assert copied and copied <= set(listed), sorted(copied)
    # the gaps that matter are written down, not hidden
    assert "not 3.10" in listed["docker.io/library/python:3.10-slim-bookworm"]
    assert "not Ubuntu" in listed["docker.io/library/ubuntu:24.04"]
    assert "trixie" in listed["docker.io/library/python:3.13-slim-bookworm"]


def test_unknown_name_is_refused_naming_the_choices():
    res = subprocess.run([sys.executable, str(SCRIPT), "--only", "python:2.7"], capture_output=True, text=True)
    assert res.returncode == 2
    assert "python:2.7" in res.stderr and "ubuntu:24.04" in res.stderr


def _podman(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_standins_build_a_real_dockerfile_offline_and_mark_it(tmp_path: Path):
    env = ensure_standins("python:3.13-slim-bookworm", "ubuntu:24.04")
    for name in ("python:3.13-slim-bookworm", "ubuntu:24.04"):
        res = _podman(env, "image", "inspect", "--format", '{{index .Labels "io.farm.standin"}}',
                      f"docker.io/library/{name}")
        assert res.stdout.strip() == "true", (name, res.stderr)
    # a real TB2 Dockerfile, unedited, with no registry: the short name resolves to the stand-in
    src = shared_path("fixtures", "terminal-bench-2.0", "cancel-async-tasks", "environment")
    ctx = tmp_path / "ctx"
    shutil.copytree(src, ctx)
    tag = f"localhost/farm-test-standin-{uuid.uuid4().hex[:8]}"
    res = _podman(env, "build", "--pull=never", "-t", tag, str(ctx), timeout=1800)
    assert res.returncode == 0, res.stderr[-2000:]
    try:
        label = _podman(env, "image", "inspect", "--format", '{{index .Labels "io.farm.standin"}}', tag)
        assert label.stdout.strip() == "true"  # inherited: farm's rows read it
        # what the official python image offers: python/pip on PATH from /usr/local/bin, system pip
        run = _podman(env, "run", "--rm", tag, "sh", "-c",
                      "for c in python python3 pip pip3; do command -v $c; done; "
                      "python -c 'import sys; print(sys.version_info[:2])'; "
                      "echo $LANG; pip install --no-index --no-deps /nonexistent.whl 2>&1 | "
                      "grep -c externally-managed || true; "
                      # pip alone, as in the official 3.12+ images (Debian's wheel had no RECORD)
                      "python3 -m pip freeze --all 2>/dev/null; "
                      # a task's `pip install --upgrade pip==X` first uninstalls the image's pip
                      "python3 -m pip uninstall -y pip >/dev/null 2>&1 && echo uninstalled")
        assert run.returncode == 0, run.stderr
        lines = run.stdout.split()
        assert lines[:4] == ["/usr/local/bin/python", "/usr/local/bin/python3", "/usr/local/bin/pip",
                             "/usr/local/bin/pip3"], run.stdout
        assert "".join(lines[4:6]) == "(3,13)" and lines[6] == "C.UTF-8" and lines[7] == "0", run.stdout
        assert len(lines) == 10 and lines[8].startswith("pip==") and lines[9] == "uninstalled", run.stdout
    finally:
        _podman(env, "rmi", "-f", tag)
    # ubuntu-style steps work on the Debian root where the package exists
    ub = _podman(env, "run", "--rm", "docker.io/library/ubuntu:24.04", "sh", "-c", "id -u ubuntu; command -v apt-get")
    assert ub.stdout.split() == ["1000", "/usr/bin/apt-get"], ub.stdout + ub.stderr
