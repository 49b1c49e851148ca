"""A container engine that cannot run containers (the `docker` CLI without its daemon) stops
`farm run` at the preflight, before any trial, in the engine's own words and naming the setting
to change; an image build that fails says what the engine said, or that it said nothing
(farm/run/preflight.py check_engines, farm/sandbox/docker/sandbox.py, farm/sandbox/images/ensure.py).

The engine here is a fake binary (a shell script): no real Docker is needed to fail like one
without its daemon, and the script records every call it gets.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from farm.cli import EXIT_PREFLIGHT, main
from farm.config import load_config
from farm.sandbox.base import SandboxStartError
from farm.sandbox.images.ensure import build_image, forget_failures
from farm.sandbox.registry import engine_problem
from farm.store import ResultStore
from tests.support.tasks import make_task

NO_DAEMON = ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
             "Is the docker daemon running?")


def _fake_engine(root: Path, body: str, name: str = "docker") -> tuple[Path, Path]:
    """An engine binary running ``body`` (sh) after logging its arguments; (binary, call log)."""
    root.mkdir(parents=True, exist_ok=True)
    calls = root / "calls.log"
    binary = root / name
    binary.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n{body}\n')
    binary.chmod(0o755)
    return binary, calls


def test_an_engine_without_its_daemon_stops_the_run_before_any_trial(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    docker, calls = _fake_engine(tmp_path / "bin", f'case "$1" in --version) echo "Docker version 27.5.1";; '
                                                   f'*) echo "{NO_DAEMON}" >&2; exit 1;; esac')
    store = tmp_path / "store"
    code = main(["run", "-q", "sandbox=docker", f"sandbox.docker.engine={docker}", "agent=oracle",
                 "run.executor=local", f"store.uri={store}"])
    err = capsys.readouterr().err
    assert code == EXIT_PREFLIGHT, err
    flat = " ".join(err.split())  # the console wraps the line
    assert NO_DAEMON in flat and f"sandbox.docker.engine='{docker}'" in flat
    assert "sandbox.docker.engine=podman" in flat  # the setting to change
    # it only asked: nothing was built, pulled or started
    assert {line.split()[0] for line in calls.read_text().splitlines()} <= {"info", "--version"}
    for run in (store / "runs").iterdir() if (store / "runs").is_dir() else []:
        assert ResultStore.open(str(store)).read_trials(run.name).num_rows == 0


def test_a_working_engine_passes(tmp_path: Path) -> None:
    docker, calls = _fake_engine(tmp_path / "bin", 'echo "Server Version: 27.5.1"')
    cfg = load_config(["sandbox=docker", f"sandbox.docker.engine={docker}"])
    assert asyncio.run(engine_problem(cfg.sandbox, 20)) is None
    assert calls.read_text().split() == ["info"]


def test_a_working_podman_passes() -> None:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    cfg = load_config(["sandbox=docker", "sandbox.docker.engine=podman"])
    assert asyncio.run(engine_problem(cfg.sandbox, 60)) is None


def test_an_engine_that_hangs_is_named_with_the_timeout(tmp_path: Path) -> None:
    docker, _ = _fake_engine(tmp_path / "bin", "exec sleep 30")
    cfg = load_config(["sandbox=docker", f"sandbox.docker.engine={docker}"])
    problem = asyncio.run(engine_problem(cfg.sandbox, 0.5))
    assert problem is not None and "did not answer in 0.5 s" in problem


def test_other_backends_have_no_engine_to_ask() -> None:
    assert asyncio.run(engine_problem(load_config(["sandbox=local"]).sandbox, 1)) is None


def test_a_build_the_engine_said_nothing_about_says_so(tmp_path: Path) -> None:
    # inspect finds nothing, the build fails without a word: the row's message must still say something
    docker, _ = _fake_engine(tmp_path / "bin", 'case "$1" in --version) echo "Docker version 27.5.1";; '
                                              '*) exit 1;; esac')
    env_dir = tmp_path / "task" / "environment"
    env_dir.mkdir(parents=True)
    (env_dir / "Dockerfile").write_text("FROM debian:12\nRUN true\n")
    task = make_task(dockerfile=str(env_dir / "Dockerfile"), build_context=env_dir, task_id="silent")
    forget_failures()
    with pytest.raises(SandboxStartError) as exc:
        asyncio.run(build_image(str(docker), task, lock_dir=tmp_path / "locks"))
    message = str(exc.value)
    first, _, tail = message.partition("\n")
    assert exc.value.reason == "image_build"
    assert "exited with code 1" in first and "the engine printed nothing" in first
    assert f"`{docker} build" in tail and "exited with code 1)" in tail
    forget_failures()


def test_a_failed_build_names_the_engines_last_words_in_its_first_line(tmp_path: Path) -> None:
    docker, _ = _fake_engine(tmp_path / "bin", f'case "$1" in --version) echo "Docker version 27.5.1";; '
                                              f'*) echo "{NO_DAEMON}" >&2; exit 1;; esac')
    env_dir = tmp_path / "task" / "environment"
    env_dir.mkdir(parents=True)
    (env_dir / "Dockerfile").write_text("FROM debian:12\nRUN true\n")
    task = make_task(dockerfile=str(env_dir / "Dockerfile"), build_context=env_dir, task_id="nodaemon")
    forget_failures()
    with pytest.raises(SandboxStartError) as exc:
        asyncio.run(build_image(str(docker), task, lock_dir=tmp_path / "locks"))
    assert NO_DAEMON in str(exc.value).splitlines()[0]  # what the breaker and the summaries show
    forget_failures()
