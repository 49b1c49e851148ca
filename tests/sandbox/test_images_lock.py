"""`farm images check --lock`: every task's image resolved to a digest, written as an image lock
that a run pins to; a task without a digest is named and nothing is written (issue 15 item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.sandbox.images.check import NOT_CHECKED, PRESENT, UNREACHABLE, CheckRow, ImageState, lock_entries, write_lock
from farm.tasks.image_lock import load_image_lock
from tests.support.tasks import make_task

D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def _rows() -> tuple[list, list[CheckRow]]:
    tasks = [make_task(task_id=t, image=f"reg.example/{t}:latest") for t in ("a", "b", "c", "d", "e")]
    rows = [
        CheckRow("x/a", "pull", named=ImageState("reg.example/a:latest", PRESENT, "id", D1)),
        CheckRow("x/b", "pull", named=ImageState("reg.example/b:latest", "in registry", digest=D2)),
        CheckRow("x/c", "pull", named=ImageState("reg.example/c:latest", NOT_CHECKED)),
        CheckRow("x/d", "pull", named=ImageState("reg.example/d:latest", UNREACHABLE, detail="manifest unknown"),
                 ok=False, why="image reg.example/d:latest: not in registry (manifest unknown)"),
        CheckRow("x/e", "build", named=ImageState("reg.example/e:latest", UNREACHABLE), tag="farm-task/e:abc",
                 cached=True),
    ]
    return tasks, rows


def test_only_tasks_with_a_digest_are_locked_and_the_others_say_why() -> None:
    tasks, rows = _rows()
    entries, missing = lock_entries(rows, tasks)
    assert entries == [{"task_id": "a", "digest": D1}, {"task_id": "b", "digest": D2}]
    assert missing == ["x/c: reg.example/c:latest: registry not asked (--offline)",
                       "x/d: image reg.example/d:latest: not in registry (manifest unknown)",
                       "x/e: only a local build (farm-task/e:abc): push it (farm images build --push) "
                       "and lock the pushed image"]


def test_the_written_lock_is_one_a_run_can_pin_to(tmp_path: Path) -> None:
    tasks, rows = _rows()
    entries, _ = lock_entries(rows[:2], tasks[:2])
    path = tmp_path / "locks" / "run.json"
    write_lock(path, entries, "swebench_pro")
    lock = load_image_lock(str(path))  # what sandbox.kubernetes.image_lock=PATH loads
    assert dict(lock.digests) == {"a": D1, "b": D2}
    assert lock.image_for("a", "reg.example/a:latest") == f"reg.example/a@{D1}"
    assert not list(path.parent.glob("*.tmp"))


def test_task_ids_repeated_across_benchmarks_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"task ids \['a'\] repeat"):
        write_lock(tmp_path / "l.json", [{"task_id": "a", "digest": D1}, {"task_id": "a", "digest": D2}], "x")
    assert not (tmp_path / "l.json").exists()


def test_the_command_line_names_the_tasks_without_a_digest_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from farm.cli import main
    from tests.shared import shared_path

    tasks_dir = shared_path("fixtures", "harbor", "swebench-verified")
    lock = tmp_path / "run.lock.json"
    # offline, and these tasks' images would be built here: neither gives a digest to lock
    assert main(["images", "check", "--offline", "--lock", str(lock), f"benchmark.path={tasks_dir}"]) == 1
    err = capsys.readouterr().err
    assert err.count("no digest for swebench-verified/") == 2
    assert "lock not written: 2 of 2 tasks have no digest" in err
    assert not lock.exists()
