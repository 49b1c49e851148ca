"""What a build is and what a row says ran, on a real engine (podman, as root).

* a base image rebuilt under its old tag gives the task a new build, and `farm images check`
  names the same tag a start builds;
* a row names the build that ran (its tag and image id), not the digest the task named;
* a RUN pipeline whose first command fails fails the engine's build, naming the step.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from farm.config import DockerSandboxConfig
from farm.run.rows import fill_image
from farm.sandbox.base import SandboxStartError
from farm.sandbox.images import ensure
from farm.sandbox.images.check import check_task
from farm.store.schema import TrialResult
from tests.support.images import harbor_task
from tests.support.podman import BASE_IMAGE, local_tag, podman

pytestmark = pytest.mark.integration

LOCKED = "localhost:1/farm-nope@sha256:" + "0" * 64  # a digest-locked reference that cannot be pulled


@pytest.fixture(autouse=True)
def fresh_memory() -> None:
    ensure.forget_failures()


def _build_base(tmp_path: Path, tag: str, text: str) -> str:
    """``tag`` built on the bare Debian image with /base.txt holding ``text``; its image id."""
    ctx = tmp_path / f"base-{uuid.uuid4().hex[:6]}"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN echo {text} > /base.txt && echo {text} > /{text}.txt\n")
    done = podman("build", "--pull=never", "-t", tag, str(ctx))
    assert done.returncode == 0, done.stderr
    return podman("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()


def _cat(image: str, *paths: str) -> str:
    done = podman("run", "--rm", "--network=none", image, "cat", *paths)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_base_rebuilt_under_its_tag_is_a_new_build_and_check_agrees(
        podman_env: dict[str, str], tmp_path: Path, tags: list[str]) -> None:
    base = f"localhost/farm-test-rebase:{uuid.uuid4().hex[:8]}"
    tags.append(base)
    old_base = _build_base(tmp_path, base, "one")
    task = harbor_task(tmp_path, f"FROM {base}\nRUN cp /base.txt /seen.txt\n", name=f"r{uuid.uuid4().hex[:8]}")
    cfg = DockerSandboxConfig(engine="podman", pull="never")

    first = await ensure.build_image("podman", task, pull="never")
    tags.insert(0, first.ref)
    assert first.provenance.source == "built" and _cat(first.ref, "/seen.txt") == "one\n"
    row = await check_task("podman", task, cfg, "build", registry=False)
    assert row.tag == first.ref and row.cached  # `farm images check` names the tag a start uses

    new_base = _build_base(tmp_path, base, "two")  # same tag, new image
    assert new_base != old_base
    tags.append(old_base)  # now untagged: removed after the builds on it
    row = await check_task("podman", task, cfg, "build", registry=False)
    assert row.tag not in (None, first.ref) and not row.cached and row.status == "build: to build"

    second = await ensure.build_image("podman", task, pull="never")
    tags.insert(0, second.ref)
    assert second.provenance.source == "built" and second.ref == row.tag == local_tag(task)
    assert second.facts.image_id != first.facts.image_id
    assert _cat(second.ref, "/seen.txt", "/two.txt") == "two\ntwo\n"  # built on the new base
    again = await ensure.build_image("podman", task, pull="never")
    assert again.provenance.source == "cached" and again.ref == second.ref


async def test_a_row_names_the_build_that_ran_not_the_digest_the_task_named(
        podman_env: dict[str, str], tmp_path: Path, tags: list[str]) -> None:
    task = harbor_task(tmp_path, f"FROM {BASE_IMAGE}\nRUN echo built > /built.txt\n", docker_image=LOCKED,
                       name=f"n{uuid.uuid4().hex[:8]}")
    tag = local_tag(task)
    tags.append(tag)
    for source in ("built", "cached"):
        # pull-or-build: the locked digest cannot be pulled, so the Dockerfile is built (then reused)
        got = await ensure.ensure_image("podman", task, "pull-or-build", LOCKED, pull="missing")
        row = TrialResult(run_id="r", trial_key="k", benchmark="b", task_id=task.task_id, seed=0, arm="a",
                          attempt=1, model=None, status="infra_error", image=task.environment.image)
        assert row.image == LOCKED
        fill_image(row, got.provenance)
        image_id = podman("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()
        assert (row.image, row.image_id, row.image_source) == (tag, image_id, source)


async def test_a_failing_command_inside_a_run_pipeline_fails_the_engine_build(
        podman_env: dict[str, str], tmp_path: Path, tags: list[str]) -> None:
    task = harbor_task(tmp_path, f"FROM {BASE_IMAGE}\nRUN echo before\nRUN false | true\nRUN echo after\n",
                       name=f"p{uuid.uuid4().hex[:8]}")
    tag = local_tag(task)
    tags.append(tag)
    with pytest.raises(SandboxStartError) as e:
        await ensure.build_image("podman", task, pull="never")
    assert e.value.reason == "image_build"
    # the failing step, then the engine's last line (issue 40: the first line is all a summary shows)
    first = str(e.value).splitlines()[0]
    assert "at step RUN false | true: " in first and "exited with code" in first, first
    assert podman("image", "exists", tag).returncode != 0
    log = e.value.build_log.decode()  # type: ignore[attr-defined]
    assert "with pipefail on its RUN pipelines" in log and "echo after" not in log
