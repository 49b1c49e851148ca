"""`farm images check` on a real engine (podman as root, runc): what each task's image would be,
without a pull or a build. The tasks build on the bare Debian image of tests/support/podman.py;
every tag a test makes is removed after it.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from farm.config import DockerSandboxConfig
from farm.errors import ConfigError
from farm.sandbox.images import engine, ensure
from farm.sandbox.images.check import ABSENT, NOT_CHECKED, PRESENT, UNREACHABLE, check_task, check_tasks
from tests.support.images import harbor_task
from tests.support.podman import BASE_IMAGE, UNPULLABLE, local_tag, podman


def _cfg(pull: str = "missing") -> DockerSandboxConfig:
    return DockerSandboxConfig(engine="podman", pull=pull)


@pytest.mark.integration
async def test_a_present_image_is_reported_with_its_id_and_nothing_is_pulled_or_built(
        podman_env: dict[str, str], tmp_path: Path) -> None:
    task = harbor_task(tmp_path, f"FROM {BASE_IMAGE}\nRUN true\n", docker_image=BASE_IMAGE, name="named")
    row = await check_task("podman", task, _cfg(), "pull")
    base_id = podman("image", "inspect", "--format", "{{.Id}}", BASE_IMAGE).stdout.strip()
    assert row.ok and row.plan == "pull" and row.status == "pull: present"
    assert row.named is not None and (row.named.ref, row.named.state) == (BASE_IMAGE, PRESENT)
    assert row.named.image_id == base_id and row.tag is None and row.bases == []
    # unreachable registry: the pull cannot resolve, and says why
    gone = harbor_task(tmp_path, f"FROM {BASE_IMAGE}\nRUN true\n", docker_image=UNPULLABLE, name="gone")
    row = await check_task("podman", gone, _cfg(), "pull")
    assert not row.ok and row.status == "unresolvable" and row.named is not None
    assert row.named.state == UNREACHABLE and UNPULLABLE in row.why
    offline = await check_task("podman", gone, _cfg(), "pull", registry=False)
    assert offline.ok and offline.named is not None and offline.named.state == NOT_CHECKED
    never = await check_task("podman", gone, _cfg("never"), "pull")
    assert not never.ok and never.named is not None and never.named.state == ABSENT and "pull=never" in never.why
    assert podman("image", "exists", UNPULLABLE).returncode != 0  # nothing was pulled


@pytest.mark.integration
async def test_a_build_plan_names_its_tag_bases_and_instructions_and_sees_a_cached_build(
        podman_env: dict[str, str], tmp_path: Path, tags: list[str]) -> None:
    standin = f"localhost/farm-test-standin:{uuid.uuid4().hex[:8]}"
    tags.append(standin)
    ctx = tmp_path / "standin"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nLABEL {engine.STANDIN_LABEL}=true\n")
    assert podman("build", "--pull=never", "-t", standin, str(ctx)).returncode == 0
    dockerfile = (f"FROM {BASE_IMAGE} AS tools\nRUN echo tool > /tool\n"
                  f"FROM {standin}\nCOPY --from=tools /tool /tool\nWORKDIR /app\nENV A=1\nRUN true\n")
    task = harbor_task(tmp_path, dockerfile, docker_image=UNPULLABLE, name=f"t{uuid.uuid4().hex[:8]}")
    tag = local_tag(task)
    tags.append(tag)
    row = await check_task("podman", task, _cfg("never"), "pull-or-build")
    assert row.ok and row.plan == "pull, else build" and row.status == "build: to build"
    assert row.tag == tag and not row.cached and row.why == ""
    assert [(b.ref, b.state, b.standin) for b in row.bases] == [(BASE_IMAGE, PRESENT, False),
                                                                 (standin, PRESENT, True)]
    assert row.instructions == ["FROM", "RUN", "COPY", "WORKDIR", "ENV"]
    assert podman("image", "exists", tag).returncode != 0  # a check builds nothing
    await ensure.build_image("podman", task, pull="never")
    again = await check_task("podman", task, _cfg("never"), "build")
    assert again.ok and again.cached and again.status == "build: cached" and again.plan == "build"


@pytest.mark.integration
async def test_a_build_whose_base_is_absent_under_pull_never_cannot_resolve(
        podman_env: dict[str, str], tmp_path: Path) -> None:
    missing = f"localhost/farm-test-absent:{uuid.uuid4().hex[:8]}"
    task = harbor_task(tmp_path, f"FROM {missing}\nRUN true\n", name="nobase")
    row = await check_task("podman", task, _cfg("never"), "build")
    assert not row.ok and row.bases[0].state == ABSENT and f"base {missing}: absent" in row.why
    # with pulls allowed, the base is looked up in its registry (here: none answers)
    row = await check_task("podman", task, _cfg("missing"), "build")
    assert not row.ok and row.bases[0].state == UNREACHABLE


@pytest.mark.integration
def test_farm_images_check_prints_a_table_and_exits_1_when_a_task_cannot_resolve(
        podman_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from farm.cli import main

    bench = tmp_path / "bench"
    harbor_task(bench, f"FROM {BASE_IMAGE}\nRUN true\n", name="good")
    harbor_task(bench, "FROM localhost/farm-test-absent:none\nRUN true\n", name="bad")
    args = ["images", "check", f"benchmark.path={bench}", "sandbox.docker.engine=podman",
            "sandbox.docker.pull=never", "sandbox.image_policy=build"]
    assert main(args) == 1
    out = capsys.readouterr()
    rows = {line.split("│")[1].strip(): line for line in out.out.splitlines() if line.count("│") >= 6}
    good = next(v for k, v in rows.items() if k.endswith("/good"))
    bad = next(v for k, v in rows.items() if k.endswith("/bad"))
    assert "build: to build" in good and "unresolvable" in bad
    assert "unresolvable bench/bad: build: base localhost/farm-test-absent:none: absent" in out.err
    harbor_task(bench / "ok", f"FROM {BASE_IMAGE}\nRUN true\n", name="only")
    assert main(["images", "check", f"benchmark.path={bench / 'ok'}", "sandbox.docker.engine=podman",
                 "sandbox.docker.pull=never"]) == 0


# --- the plan part, without an engine call that matters -------------------------------------------


def test_a_task_without_image_or_dockerfile_cannot_resolve_and_names_why(tmp_path: Path) -> None:
    loaded = harbor_task(tmp_path, "FROM x\n", name="bare")
    task = replace(loaded, environment=replace(loaded.environment, image=None, dockerfile=None))
    row = asyncio.run(check_task("true", task, _cfg(), "pull-or-build"))
    assert not row.ok and row.plan == "pull" and "has no image" in row.why


def test_a_digest_lock_without_the_task_is_unresolvable_before_any_engine_call(tmp_path: Path) -> None:
    lock = tmp_path / "lock.json"
    lock.write_text('{"images": [{"task_id": "other", "digest": "sha256:' + "0" * 64 + '"}]}')
    task = harbor_task(tmp_path, "FROM debian:bookworm\n", docker_image="debian:bookworm", name="locked")
    cfg = DockerSandboxConfig(engine="false", image_lock=str(lock))
    row = asyncio.run(check_task("false", task, cfg, "pull"))
    assert not row.ok and "has no digest for task 'locked'" in row.why


def test_the_reference_checked_is_the_one_after_the_mirror(tmp_path: Path) -> None:
    task = harbor_task(tmp_path, "FROM debian:bookworm\n", docker_image="debian:bookworm", name="mirrored")
    cfg = DockerSandboxConfig(engine="false", image_registry="mirror.example.invalid")
    # engine `false`: nothing is present; offline, the registry is not asked
    row = asyncio.run(check_task("false", task, cfg, "pull", registry=False))
    assert row.ok and row.named is not None
    assert (row.named.ref, row.named.state) == ("mirror.example.invalid/library/debian:bookworm", NOT_CHECKED)


def test_an_unknown_policy_is_a_config_error(tmp_path: Path) -> None:
    task = harbor_task(tmp_path, "FROM debian:bookworm\n", name="p")
    with pytest.raises(ConfigError, match="sandbox.image_policy"):
        asyncio.run(check_tasks("true", [task], _cfg(), "sometimes"))


def test_a_run_refuses_a_task_whose_build_base_is_absent_offline_once_before_any_start(
        podman_env: dict[str, str], tmp_path: Path) -> None:
    # the preflight's image half: `farm images check` without a registry, on the run's own tasks
    from farm.config import load_config
    from farm.run.driver import run_experiment
    from farm.store import ResultStore

    bench = tmp_path / "bench"
    harbor_task(bench, "FROM localhost/farm-no-such-base:1\nRUN true\n", name="absent-base")
    cfg = load_config([f"benchmark.path={bench}", "sandbox=docker", "sandbox.docker.engine=podman",
                       "sandbox.docker.pull=never", "sandbox.image_policy=build", "run.executor=local",
                       f"store.uri={tmp_path / 'store'}", "run.progress=false", "run.max_attempts=3"])
    summary = asyncio.run(run_experiment(cfg))
    rows = ResultStore.open(str(tmp_path / "store")).read_trials(summary.run_id, dedupe=False).to_pylist()
    assert [(r["status"], r["error_class"], r["attempt"]) for r in rows] == [
        ("infra_error", "task_unsupported:image_unresolvable", 1)]
    assert "localhost/farm-no-such-base:1" in rows[0]["error"] and rows[0]["sandbox_start_s"] is None
    again = asyncio.run(run_experiment(cfg))  # resume adds nothing: the refusal is deterministic
    assert len(ResultStore.open(str(tmp_path / "store")).read_trials(again.run_id, dedupe=False)) == 1
