"""sandbox=docker builds the task's own Dockerfile on a real engine (podman, as root, runc).

Each test builds a tiny Dockerfile on the bare Debian image of tests/support/podman.py with
``--pull=never`` (nothing is fetched) under a task id of its own, and removes its tags after.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from farm.config import DockerSandboxConfig
from farm.sandbox.base import SandboxStartError
from farm.sandbox.docker.sandbox import ContainerSandbox
from farm.sandbox.images import engine, ensure, plan
from farm.tasks.model import Task
from tests.support.images import harbor_task
from tests.support.podman import BASE_IMAGE, TOOLBOX_IMAGE, UNPULLABLE, local_tag, podman

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def fresh_memory() -> None:
    ensure.forget_failures()


def _task(tmp_path: Path, dockerfile: str, tags: list[str], **kw: Any) -> Task:
    task = harbor_task(tmp_path, dockerfile, name=f"t{uuid.uuid4().hex[:8]}", **kw)
    tags.append(local_tag(task))
    return task


def _sandbox(task: Task, policy: str = "pull-or-build", pull: str = "never",
             run_id: str = "run-images") -> ContainerSandbox:
    cfg = DockerSandboxConfig(engine="podman", toolbox_image=TOOLBOX_IMAGE, pull=pull)
    return ContainerSandbox(task, cfg, run_id=run_id, trial_key=uuid.uuid4().hex, network="no-network",
                            image_policy=policy)


DOCKERFILE = f"""FROM {BASE_IMAGE}
WORKDIR /srv
COPY data.txt ./
RUN cat data.txt > /built.txt && echo "built at $(date +%s%N)" >> /built.txt
ENV FARM_IMAGE_VAR=from-the-image
WORKDIR /srv/app
"""


async def test_built_image_holds_file_env_workdir_and_a_second_start_reuses_it(
        podman_env: dict[str, str], tmp_path: Path, tags: list[str]) -> None:
    # a task that names an unpullable prebuilt image: pull-or-build falls back to building
    task = _task(tmp_path, DOCKERFILE, tags, docker_image=UNPULLABLE, files={"data.txt": "context file\n"})
    assert task.environment.build_steps == ()
    first, second = _sandbox(task, pull="missing"), _sandbox(task, pull="missing")
    t0 = time.monotonic()
    try:
        # two trials of one task at once: one builds, the other waits on the tag's lock and reuses it
        await asyncio.gather(first.start(), second.start())
        print(f"two concurrent starts with one build: {time.monotonic() - t0:.1f} s")
        by_source = {sb.stats.image.source: sb for sb in (first, second)}  # type: ignore[union-attr]
        assert sorted(by_source) == ["built", "cached"]
        built, cached = by_source["built"].stats.image, by_source["cached"].stats.image
        assert built is not None and cached is not None
        assert built.build_s is not None and built.build_s > 0 and cached.build_s == 0.0
        assert built.image_id == cached.image_id and built.image_id
        assert not built.base_standin and not built.unfaithful
        log = by_source["built"].stats.artifacts[ensure.LOG_ARTIFACT].decode()
        assert "--pull=missing" in log and "RUN cat data.txt" in log and "pull failed" in log
        assert ensure.LOG_ARTIFACT not in by_source["cached"].stats.artifacts
        for sb in (first, second):
            assert sb.workdir == "/srv/app" and sb.image == local_tag(task)
            r = await sb.exec("head -1 /built.txt; echo $FARM_IMAGE_VAR; pwd; tail -1 /built.txt")
            assert r.exit_code == 0, r.output
            lines = r.stdout.splitlines()
            assert lines[:3] == ["context file", "from-the-image", "/srv/app"], r.output
        # the same build, not a second one: both containers see the one RUN's timestamp
        stamps = {(await sb.exec("tail -1 /built.txt")).stdout for sb in (first, second)}
        assert len(stamps) == 1
    finally:
        await first.close()
        await second.close()
    # the failed pull was remembered: a third start neither pulls nor builds
    third = _sandbox(task, pull="missing")
    t0 = time.monotonic()
    await third.start()
    try:
        assert third.stats.image is not None and third.stats.image.source == "cached"
        assert time.monotonic() - t0 < 30
    finally:
        await third.close()


async def test_a_failing_run_is_an_image_build_error_with_step_and_log_and_is_not_rebuilt(
        podman_env: dict[str, str], tmp_path: Path, tags: list[str]) -> None:
    task = _task(tmp_path, f"FROM {BASE_IMAGE}\nRUN echo about to fail\nRUN echo broken >&2; exit 3\n", tags)
    run = f"run-{uuid.uuid4().hex[:6]}"
    sb = _sandbox(task, policy="build", run_id=run)
    with pytest.raises(SandboxStartError) as e:
        await sb.start()
    assert e.value.reason == "image_build"
    assert "RUN echo broken >&2; exit 3" in str(e.value) and "exited with code" in str(e.value)
    log = sb.stats.artifacts[ensure.LOG_ARTIFACT].decode()
    assert "about to fail" in log and "broken" in log
    assert podman("container", "exists", sb.name).returncode != 0
    again = _sandbox(task, policy="build", run_id=run)
    t0 = time.monotonic()
    with pytest.raises(SandboxStartError, match="failed earlier in this process; not rebuilt") as e2:
        await again.start()
    assert e2.value.reason == "image_build" and time.monotonic() - t0 < 5
    # another worker process of the same run (its memory is empty) reads the run's record
    ensure.forget_failures()
    with pytest.raises(SandboxStartError, match="failed earlier in this run; not rebuilt") as e3:
        await _sandbox(task, policy="build", run_id=run).start()
    assert "RUN echo broken >&2; exit 3" in str(e3.value)
    # a new run builds again (the failure may have been transient)
    ensure.forget_failures()
    other = _sandbox(task, policy="build", run_id=f"run-{uuid.uuid4().hex[:6]}")
    with pytest.raises(SandboxStartError) as e4:
        await other.start()
    assert "not rebuilt" not in str(e4.value) and ensure.LOG_ARTIFACT in other.stats.artifacts


async def test_pull_policy_never_builds_and_pull_or_build_prefers_a_present_image(
        podman_env: dict[str, str], tmp_path: Path, tags: list[str]) -> None:
    task = _task(tmp_path, f"FROM {BASE_IMAGE}\nRUN touch /from-the-dockerfile\n", tags, docker_image=UNPULLABLE)
    with pytest.raises(SandboxStartError) as e:
        await _sandbox(task, policy="pull", pull="missing").start()
    assert e.value.reason == "image_pull" and UNPULLABLE in str(e.value)
    assert podman("image", "exists", tags[-1]).returncode != 0  # nothing was built

    present = _task(tmp_path, f"FROM {BASE_IMAGE}\nRUN touch /from-the-dockerfile\n", tags, docker_image=BASE_IMAGE)
    sb = _sandbox(present)
    await sb.start()
    try:
        assert sb.stats.image is not None and sb.stats.image.source == "local" and sb.image == BASE_IMAGE
        assert (await sb.exec("test -e /from-the-dockerfile || echo absent")).stdout.strip() == "absent"
    finally:
        await sb.close()
    assert podman("image", "exists", tags[-1]).returncode != 0


async def test_a_build_on_a_standin_base_is_marked(podman_env: dict[str, str], tmp_path: Path,
                                                   tags: list[str]) -> None:
    standin = f"localhost/farm-test-standin:{uuid.uuid4().hex[:8]}"
    tags.append(standin)
    ctx = tmp_path / "standin"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nLABEL {engine.STANDIN_LABEL}=true\n")
    assert podman("build", "--pull=never", "-t", standin, str(ctx)).returncode == 0
    task = _task(tmp_path, f"FROM {standin}\nRUN true\n", tags)
    sb = _sandbox(task, policy="build")
    await sb.start()
    try:
        prov = sb.stats.image
        assert prov is not None and prov.source == "built" and prov.base_standin
    finally:
        await sb.close()


def test_farm_images_build_prints_a_table_and_fails_when_a_build_fails(
        podman_env: dict[str, str], tmp_path: Path, tags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from farm.cli import main

    bench = tmp_path / "bench"
    ok = harbor_task(bench, f"FROM {BASE_IMAGE}\nRUN true\n", name="good")
    bad = harbor_task(bench, f"FROM {BASE_IMAGE}\nRUN exit 7\n", name="bad")
    for t in (ok, bad):
        tags.append(local_tag(t))
    args = ["images", "build", f"benchmark.path={bench}", "sandbox.docker.engine=podman", "sandbox.docker.pull=never",
            "--jobs", "2"]
    assert main(args) == 1
    out = capsys.readouterr()
    rows = {line.split("│")[1].strip(): line for line in out.out.splitlines() if line.count("│") >= 4}
    good_row = next(v for k, v in rows.items() if k.endswith("/good"))
    bad_row = next(v for k, v in rows.items() if k.endswith("/bad"))
    assert " built " in good_row and " failed " in bad_row and "RUN exit 7" in out.err
    ensure.forget_failures()
    assert main(args) == 1
    again = capsys.readouterr().out
    assert " cached " in next(line for line in again.splitlines() if "/good " in line)


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real OCI registry (Debian's docker-registry) on 127.0.0.1, plain HTTP, marked insecure
    for podman through CONTAINERS_REGISTRIES_CONF as a user's registries.conf would."""
    import shutil
    import socket

    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.skip("needs a local registry: apt-get install docker-registry")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "registry.yml").write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path}/reg\n"
                                           f"http:\n  addr: 127.0.0.1:{port}\nlog:\n  level: warn\n")
    conf = tmp_path / "registries.conf"
    conf.write_text(f'[[registry]]\nlocation = "127.0.0.1:{port}"\ninsecure = true\n')
    monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(conf))
    proc = subprocess.Popen([binary, "serve", str(tmp_path / "registry.yml")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        import httpx

        for _ in range(100):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_farm_images_build_push_serves_the_tag_a_cluster_runs(
        podman_env: dict[str, str], tmp_path: Path, tags: list[str], registry: str) -> None:
    import httpx

    from farm.cli import main

    bench = tmp_path / "bench"
    task = harbor_task(bench, f"FROM {BASE_IMAGE}\nRUN echo pushed > /pushed\n", name="pushme")
    # the pushed tag is keyed by the task's files alone (a cluster cannot see this engine's bases)
    local, remote = local_tag(task), plan.task_build_tag(task, f"{registry}/farm")
    assert remote is not None
    tags += [local, remote]
    args = ["images", "build", "--push", f"{registry}/farm", f"benchmark.path={bench}",
            "sandbox.docker.engine=podman", "sandbox.docker.pull=never"]
    assert main(args) == 0
    repo, tag = remote.split("/", 1)[1].rsplit(":", 1)
    listed = httpx.get(f"http://{registry}/v2/{repo}/tags/list", timeout=10).json()
    assert listed["tags"] == [tag]
    # what the registry serves is the local build: pulled back, it is the same image
    built_id = podman("image", "inspect", "--format", "{{.Id}}", local).stdout.strip()
    assert podman("rmi", remote).returncode == 0
    assert podman("pull", remote).returncode == 0
    assert podman("image", "inspect", "--format", "{{.Id}}", remote).stdout.strip() == built_id


async def test_an_absent_base_is_pulled_before_the_tag_is_computed(
        podman_env: dict[str, str], tmp_path: Path, tags: list[str], registry: str) -> None:
    # the tag covers the base's local id: were an absent base named by its reference only, the
    # next start (the base now pulled by the build) would compute another tag and build again
    base = f"{registry}/farm-test-pulled-base:{uuid.uuid4().hex[:8]}"
    tags.append(base)
    for args in (("tag", BASE_IMAGE, base), ("push", base), ("rmi", base)):
        done = podman(*args)
        assert done.returncode == 0, done.stderr
    task = harbor_task(tmp_path, f"FROM {base}\nRUN true\n", name=f"a{uuid.uuid4().hex[:8]}")
    first = await ensure.build_image("podman", task, pull="missing")
    tags.insert(0, first.ref)
    assert first.provenance.source == "built" and podman("image", "exists", base).returncode == 0
    second = await ensure.build_image("podman", task, pull="missing")
    assert second.provenance.source == "cached" and second.ref == first.ref == local_tag(task)
