"""Shared by the benchmark tests: `make images`' stand-ins, built (or found up to date) once per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.requirements import require

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "standin_images.py"
CACHE = Path(os.environ.get("FARM_IMAGES_CACHE", "/var/tmp/farm-images"))


def podman_env() -> dict[str, str]:
    """The environment `make images` gives podman (its containers.conf unless one is set)."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CACHE / "containers.conf"))
    return env


def ensure_standins(*names: str) -> dict[str, str]:
    """Run the script (idempotent: cached roots and up-to-date images are reused, never required);
    returns podman's environment. Skips without root, podman or debootstrap."""
    require("root", "engine", "debootstrap")  # make images
    only = ["--only", *names] if names else []
    res = subprocess.run([sys.executable, str(SCRIPT), "--cache", str(CACHE), *only],
                         capture_output=True, text=True, timeout=3600, env=podman_env())
    assert res.returncode == 0, res.stderr[-3000:]
    env = podman_env()
    os.environ.setdefault("CONTAINERS_CONF", env["CONTAINERS_CONF"])  # farm's engine calls inherit it
    return env
