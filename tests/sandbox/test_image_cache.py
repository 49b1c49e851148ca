"""Eviction and pruning of farm's task builds on a real engine (podman as root, runc).

Every test builds tiny images of its own (``--pull=never`` on the bare Debian test image) and
scopes eviction to them with ``select``, so the builds of other runs on this machine (a
Terminal-Bench run's cache) are never touched.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from farm.sandbox.images import cache as image_cache
from farm.sandbox.images import ensure
from farm.tasks.model import Task
from tests.support.images import harbor_task
from tests.support.podman import BASE_IMAGE, local_tag, podman

pytestmark = pytest.mark.integration


def _exists(ref: str) -> bool:
    return podman("image", "exists", ref).returncode == 0


@pytest.fixture
def made() -> Any:
    """Tags and containers a test makes; removed after it (forced, whatever the test left)."""
    out: dict[str, list[str]] = {"tags": [], "containers": []}
    yield out
    for c in out["containers"]:
        podman("rm", "-f", c)
    for tag in out["tags"]:
        podman("rmi", "-f", tag)


def _built(root: Path, name: str, made: dict[str, list[str]], marker: str = "") -> tuple[Task, str]:
    task = harbor_task(root, f"FROM {BASE_IMAGE}\nRUN echo {name}{marker} > /which\n", name=name)
    got = asyncio.run(ensure.build_image("podman", task, pull="never"))
    made["tags"].append(got.ref)
    assert got.provenance.source == "built"
    time.sleep(1.1)  # the engine's creation times have one-second resolution: keep the order strict
    return task, got.ref


def test_eviction_removes_the_oldest_build_first_and_spares_the_kept_tag_and_images_in_use(
        podman_env: dict[str, str], tmp_path: Path, made: dict[str, list[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    run = f"e{uuid.uuid4().hex[:6]}"
    _, in_use = _built(tmp_path, f"{run}-inuse", made)  # the oldest, but a container holds it
    _, kept = _built(tmp_path, f"{run}-kept", made)  # the next oldest, but the build about to run
    _, oldest_free = _built(tmp_path, f"{run}-old", made)
    _, middle = _built(tmp_path, f"{run}-mid", made)
    container = f"farm-test-{run}"
    assert podman("create", "--name", container, in_use, "true").returncode == 0
    made["containers"].append(container)
    # The disk counts as full until the oldest removable build is gone: eviction must stop there.
    monkeypatch.setattr(image_cache, "free_bytes", lambda _p: 10 if _exists(oldest_free) else 10 ** 15)
    removed = asyncio.run(image_cache.evict_for_space(
        "podman", 10 ** 12, keep=frozenset({kept}), select=lambda i: i.task.startswith(f"bench/{run}-")))
    assert [r.refs for r in removed] == [(oldest_free,)]
    assert not _exists(oldest_free)
    assert _exists(in_use) and _exists(middle) and _exists(kept)


def test_eviction_does_nothing_when_enough_is_free_and_everything_when_nothing_is_enough(
        podman_env: dict[str, str], tmp_path: Path, made: dict[str, list[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    run = f"f{uuid.uuid4().hex[:6]}"
    _, a = _built(tmp_path, f"{run}-a", made)
    _, b = _built(tmp_path, f"{run}-b", made)
    mine = lambda i: i.task.startswith(f"bench/{run}-")  # noqa: E731
    monkeypatch.setattr(image_cache, "free_bytes", lambda _p: 10 ** 6)
    assert asyncio.run(image_cache.evict_for_space("podman", 10 ** 6, select=mine)) == []
    assert _exists(a) and _exists(b)
    removed = asyncio.run(image_cache.evict_for_space("podman", 10 ** 7, select=mine))
    assert sorted(r.refs[0] for r in removed) == sorted([a, b])
    assert not _exists(a) and not _exists(b)


def test_a_build_below_the_free_space_floor_evicts_first_keeping_its_own_tag(
        podman_env: dict[str, str], tmp_path: Path, made: dict[str, list[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, frozenset[str]]] = []

    async def record(binary: str, min_free: int, *, keep: frozenset[str] = frozenset(), **_: Any) -> list[Any]:
        calls.append((min_free, keep))
        return []

    monkeypatch.setattr(image_cache, "evict_for_space", record)
    task = harbor_task(tmp_path, f"FROM {BASE_IMAGE}\nRUN true\n", name=f"g{uuid.uuid4().hex[:6]}")
    tag = local_tag(task)
    made["tags"].append(tag)
    asyncio.run(ensure.build_image("podman", task, pull="never", min_free_gb=2.5))
    assert calls == [(int(2.5 * image_cache.GIB), frozenset({tag}))]
    asyncio.run(ensure.build_image("podman", task, pull="never", min_free_gb=2.5))
    assert len(calls) == 1  # a cached tag builds nothing, so nothing is evicted for it
    other = harbor_task(tmp_path, f"FROM {BASE_IMAGE}\nRUN true\n", name=f"h{uuid.uuid4().hex[:6]}")
    made["tags"].append(local_tag(other))
    asyncio.run(ensure.build_image("podman", other, pull="never"))
    assert len(calls) == 1  # min_free_gb=None: never evict


def test_prune_removes_stale_builds_of_the_selected_tasks_only(
        podman_env: dict[str, str], tmp_path: Path, made: dict[str, list[str]],
        capsys: pytest.CaptureFixture[str]) -> None:
    from farm.cli import main

    run = f"p{uuid.uuid4().hex[:6]}"
    bench, other = tmp_path / "bench", tmp_path / "other"
    _, old = _built(bench, f"{run}-t", made)
    _, unselected = _built(other, f"{run}-u", made)
    # the task's Dockerfile changes: the old build is stale, the new one current
    _, new = _built(bench, f"{run}-t", made, marker="-v2")
    assert old != new
    args = ["images", "prune", f"benchmark.path={bench}", "sandbox.docker.engine=podman"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert old in out and new not in out and "1 stale builds removed" in out
    assert not _exists(old) and _exists(new)
    (other / f"{run}-u" / "environment" / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN false\n")
    assert main(args) == 0
    assert "0 stale builds removed" in capsys.readouterr().out
    assert main([*args, "--all"]) == 0
    assert "1 builds removed" in capsys.readouterr().out and not _exists(new)
    assert _exists(unselected)  # stale now too, but not a task of the selected benchmark
