"""How rows reach the store: atomic commits, steps before trials, nothing lost when a commit fails,
and which attempt a reader sees (DESIGN.md "Nothing lost")."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from farm.errors import StoreError
from farm.store import BatchWriter, ResultStore, StepRow, TrialResult, latest_attempts
from farm.store.schema import TRIALS_SCHEMA, to_table


def _row(key: str, attempt: int, status: str, finished_at: float | None = None, **kw) -> TrialResult:
    return TrialResult(run_id="r1", trial_key=key, benchmark="b", task_id="t", seed=0, arm="a", attempt=attempt,
                       model="m", status=status, finished_at=finished_at, **kw)


def _latest(rows: list[TrialResult]) -> dict[str, tuple[int, str]]:
    table = latest_attempts(to_table(rows, TRIALS_SCHEMA))
    return {r["trial_key"]: (r["attempt"], r["status"]) for r in table.to_pylist()}


# --- which attempt a reader sees ---------------------------------------------------------------


def test_highest_attempt_wins_in_any_row_order():
    rows = [_row("a", 1, "resolved", 300.0), _row("a", 2, "unresolved", 100.0), _row("b", 3, "infra_error", 1.0),
            _row("b", 1, "resolved", 2.0)]
    assert _latest(rows) == {"a": (2, "unresolved"), "b": (3, "infra_error")}
    assert _latest(rows[::-1]) == {"a": (2, "unresolved"), "b": (3, "infra_error")}


def test_equal_attempts_tie_break_on_the_later_finish():
    rows = [_row("a", 1, "resolved", 200.0), _row("a", 1, "infra_error", 100.0)]
    assert _latest(rows) == {"a": (1, "resolved")}
    assert _latest(rows[::-1]) == {"a": (1, "resolved")}


def test_equal_attempts_and_finish_times_keep_the_later_row():
    rows = [_row("a", 1, "infra_error", 100.0), _row("a", 1, "resolved", 100.0)]
    assert _latest(rows) == {"a": (1, "resolved")}
    assert _latest(rows[::-1]) == {"a": (1, "infra_error")}


def test_latest_attempts_keeps_one_row_per_key_and_empty_tables():
    rows = [_row(k, a, "resolved", float(a)) for k in ("x", "y", "z") for a in (1, 2)]
    table = latest_attempts(to_table(rows, TRIALS_SCHEMA))
    assert sorted(table.column("trial_key").to_pylist()) == ["x", "y", "z"]
    assert table.column("attempt").to_pylist() == [2, 2, 2]
    assert table.column_names == TRIALS_SCHEMA.names  # no helper column leaks out
    empty = TRIALS_SCHEMA.empty_table()
    assert latest_attempts(empty).num_rows == 0


# --- atomic commits ----------------------------------------------------------------------------


def test_local_commit_is_fsynced_temp_then_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A committed name never points at a torn file: the data is written to a temp file in the same
    directory, fsynced, and only then renamed over the final name."""
    events: list[tuple] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), os.fstat(fd).st_size))
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append(("replace", str(src), str(dst), os.path.exists(dst)))
        real_replace(src, dst)

    store = ResultStore.open(str(tmp_path / "store"))
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = store.write_artifact("r1", "k", 1, "patch.diff", b"0123456789")
    monkeypatch.undo()
    assert [e[0] for e in events] == ["fsync", "replace"]
    (_, synced, size), (_, src, dst, existed) = events
    assert synced == src and size == 10  # the temp file was synced with all its bytes
    assert dst == path and not existed
    assert os.path.dirname(src) == os.path.dirname(path) and os.path.basename(src).startswith(".tmp-")
    assert Path(path).read_bytes() == b"0123456789" and not Path(src).exists()


def test_an_overwrite_replaces_the_whole_file(tmp_path: Path):
    store = ResultStore.open(str(tmp_path / "store"))
    store.write_run_meta("r1", {"run_id": "r1", "notes": "x" * 10_000})
    store.write_run_meta("r1", {"run_id": "r1"})
    assert store.read_run_meta("r1") == {"run_id": "r1"}


def test_a_failed_write_is_a_store_error_naming_the_path(tmp_path: Path):
    store = ResultStore.open(str(tmp_path / "store"))
    (tmp_path / "store" / "artifacts").write_text("a file where a directory belongs")
    with pytest.raises(StoreError, match="artifacts"):
        store.write_artifact("r1", "k", 1, "x", b"1")


def test_temp_files_are_invisible_to_readers(tmp_path: Path):
    store = ResultStore.open(str(tmp_path / "store"))
    store.write_rows("trials", "r1", to_table([_row("a", 1, "resolved", 1.0)], TRIALS_SCHEMA))
    part_dir = tmp_path / "store" / "trials" / "run_id=r1"
    (part_dir / ".tmp-crashed.parquet").write_bytes(b"torn")  # what a crash mid-write leaves
    assert store.read_trials("r1").column("trial_key").to_pylist() == ["a"]


# --- the batching writer -----------------------------------------------------------------------


def _block(store_root: Path, table: str) -> Path:
    """Make ``table``'s partition directory impossible to create (a file stands in its place)."""
    (store_root / table).mkdir(parents=True, exist_ok=True)
    blocker = store_root / table / "run_id=r1"
    blocker.write_text("in the way")
    return blocker


def test_steps_are_committed_before_their_trials(tmp_path: Path):
    root = tmp_path / "store"
    store = ResultStore.open(str(root))
    blocker = _block(root, "steps")
    w = BatchWriter(store, "r1", batch_rows=100, flush_interval_s=3600)
    w.add(_row("a", 1, "resolved", 1.0), [StepRow("r1", "a", 1, 0)])
    with pytest.raises(StoreError):
        w.flush()
    # the steps could not be written, so no trial row may exist: a trial row always has its steps
    assert store.read_trials("r1").num_rows == 0
    assert w.pending() == 1 and w.stats.trials == 0 and w.stats.flushes == 0
    blocker.unlink()
    assert w.flush() == 1
    assert store.read_trials("r1").column("trial_key").to_pylist() == ["a"]
    assert store.read_steps("r1").column("trial_key").to_pylist() == ["a"]


def test_rows_of_a_failed_commit_are_kept_and_retried_in_order(tmp_path: Path):
    root = tmp_path / "store"
    store = ResultStore.open(str(root))
    w = BatchWriter(store, "r1", batch_rows=100, flush_interval_s=3600)
    w.add(_row("a", 1, "resolved", 1.0), [StepRow("r1", "a", 1, 0)])
    blocker = _block(root, "trials")
    with pytest.raises(StoreError):
        w.flush()
    assert w.pending() == 1
    w.add(_row("b", 1, "unresolved", 2.0), [StepRow("r1", "b", 1, 0), StepRow("r1", "b", 1, 1)])
    assert w.pending() == 2
    blocker.unlink()
    assert w.flush() == 2
    assert w.pending() == 0 and w.stats.trials == 2 and w.stats.steps == 3 and w.stats.flushes == 1
    trials = store.read_trials("r1", dedupe=False).column("trial_key").to_pylist()
    assert trials == ["a", "b"]
    # the steps of the failed commit were already written: the retry does not write them twice
    steps = sorted((s["trial_key"], s["step"]) for s in store.read_steps("r1").to_pylist())
    assert steps == [("a", 0), ("b", 0), ("b", 1)]
    assert w.flush() == 0  # nothing left


def test_writer_commits_by_size_and_by_age(tmp_path: Path):
    store = ResultStore.open(str(tmp_path / "store"))
    w = BatchWriter(store, "r1", batch_rows=2, flush_interval_s=3600)
    assert w.add(_row("a", 1, "resolved", 1.0)) is False and w.pending() == 1
    assert w.add(_row("b", 1, "resolved", 1.0)) is True and w.pending() == 0
    assert w.stats.files == 1 and w.stats.trials == 2  # no steps: no steps file
    w = BatchWriter(store, "r1", batch_rows=1000, flush_interval_s=0.2)
    assert w.add(_row("c", 1, "resolved", 1.0)) is False
    time.sleep(0.25)
    assert w.add(_row("d", 1, "resolved", 1.0)) is True
    w.add(_row("e", 1, "resolved", 1.0))
    w.close()
    assert w.pending() == 0
    assert sorted(store.read_trials("r1").column("trial_key").to_pylist()) == ["a", "b", "c", "d", "e"]


def test_empty_flush_and_empty_table_write_nothing(tmp_path: Path):
    store = ResultStore.open(str(tmp_path / "store"))
    w = BatchWriter(store, "r1")
    assert w.flush() == 0 and w.stats.flushes == 0
    assert store.write_rows("trials", "r1", TRIALS_SCHEMA.empty_table()) == ""
    assert not (tmp_path / "store" / "trials").exists()


def test_rows_written_with_a_run_id_column_are_read_back_under_the_partition(tmp_path: Path):
    store = ResultStore.open(str(tmp_path / "store"))
    table = to_table([_row("a", 1, "resolved", 1.0)], TRIALS_SCHEMA)
    path = store.write_rows("trials", "r1", table)
    import pyarrow.parquet as pq

    assert "run_id" not in pq.read_table(path).column_names  # it lives in the directory name only
    assert store.read_trials("r1").column("run_id").to_pylist() == ["r1"]
    # a file from an older farm without a newer column reads with nulls there
    old = table.drop_columns(["run_id", "attempt_uid"])
    store.write_rows("trials", "r1", old.set_column(old.schema.get_field_index("trial_key"), "trial_key",
                                                     pa.array(["b"])))
    rows = {r["trial_key"]: r for r in store.read_trials("r1").to_pylist()}
    assert rows["b"]["attempt_uid"] is None and rows["b"]["status"] == "resolved"
