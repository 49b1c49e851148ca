from __future__ import annotations

import time

import duckdb
import pyarrow.parquet as pq
import pytest

from farm.errors import StoreError
from farm.store import BatchWriter, ResultStore, StepRow, TrialResult


def _row(key: str, attempt: int, status: str, **kw) -> TrialResult:
    return TrialResult(run_id="r1", trial_key=key, benchmark="builtin", task_id=f"t-{key}", seed=0, arm="base",
                       attempt=attempt, model="oracle", status=status, finished_at=time.time(), **kw)


def test_rows_roundtrip_and_latest_attempt_wins(store_uri):
    uri, endpoint = store_uri
    store = ResultStore.open(uri, endpoint)
    w = BatchWriter(store, "r1", batch_rows=2, flush_interval_s=3600)
    assert not w.add(_row("a", 1, "infra_error", error_class="sandbox_start"))
    assert w.add(_row("b", 1, "resolved", reward=1.0), [StepRow("r1", "b", 1, 0, n_tool_calls=1, tool_names=["Bash"])])
    w.add(_row("a", 2, "unresolved", reward=0.0))
    w.close()
    assert w.stats.trials == 3 and w.stats.files == 3  # steps file + two trials files
    all_rows = store.read_trials("r1", dedupe=False)
    assert all_rows.num_rows == 3
    latest = {r["trial_key"]: r for r in store.read_trials("r1").to_pylist()}
    assert latest["a"]["status"] == "unresolved" and latest["a"]["attempt"] == 2
    assert latest["b"]["run_id"] == "r1"
    steps = store.read_steps("r1").to_pylist()
    assert steps[0]["tool_names"] == ["Bash"]


def test_duplicate_commit_of_the_same_attempt_counts_once(store_uri):
    uri, endpoint = store_uri
    store = ResultStore.open(uri, endpoint)
    from farm.store.schema import TRIALS_SCHEMA, to_table

    for _ in range(2):  # a crash between "file written" and "driver noticed" re-commits it
        store.write_rows("trials", "r1", to_table([_row("a", 1, "resolved")], TRIALS_SCHEMA))
    assert store.read_trials("r1", dedupe=False).num_rows == 2
    assert store.read_trials("r1").num_rows == 1


def test_meta_plan_and_artifacts(store_uri):
    uri, endpoint = store_uri
    store = ResultStore.open(uri, endpoint)
    assert store.read_run_meta("nope") is None
    store.write_run_meta("r1", {"run_id": "r1", "config_hash": "abc"})
    store.write_plan("r1", [{"trial_key": "a", "benchmark": "b", "task_id": "t", "seed": 0, "arm": "base",
                             "model": "m"}])
    store.write_artifact("r1", "a", 1, "patch.diff", b"\x00binary\xff")
    assert store.read_run_meta("r1")["config_hash"] == "abc"
    assert store.read_plan("r1").num_rows == 1
    assert store.read_artifact("r1", "a", 1, "patch.diff") == b"\x00binary\xff"
    assert store.list_runs() == ["r1"]


def test_parquet_is_readable_without_farm(tmp_path):
    store = ResultStore.open(str(tmp_path))
    w = BatchWriter(store, "r1")
    w.add(_row("a", 1, "resolved", reward=1.0))
    w.add(_row("b", 1, "infra_error"))
    w.close()
    table = pq.read_table(tmp_path / "trials")  # Hive partition gives run_id back
    assert sorted(table.column("trial_key").to_pylist()) == ["a", "b"]
    rows = duckdb.sql(
        f"select run_id, status, count(*) from read_parquet('{tmp_path}/trials/*/*.parquet', hive_partitioning=true) "
        "group by all order by status"
    ).fetchall()
    assert rows == [("r1", "infra_error", 1), ("r1", "resolved", 1)]


def test_local_commit_leaves_no_temp_files(tmp_path):
    store = ResultStore.open(str(tmp_path))
    store.write_artifact("r1", "a", 1, "x", b"1")
    leftovers = [p for p in tmp_path.rglob(".tmp-*")]
    assert leftovers == []


def test_missing_bucket_is_named(s3_endpoint):
    with pytest.raises(StoreError, match="no-such-bucket"):
        ResultStore.open("s3://no-such-bucket/x", s3_endpoint)


def test_bad_uri_is_named():
    with pytest.raises(StoreError, match="ftp://x"):
        ResultStore.open("ftp://x/y")


def test_rows_written_before_the_ray_node_column_still_read(tmp_path):
    from farm.store.schema import TRIALS_SCHEMA, to_table

    store = ResultStore.open(str(tmp_path))
    old = to_table([_row("a", 1, "resolved")], TRIALS_SCHEMA).drop_columns(["ray_node"])  # an older farm's file
    store.write_rows("trials", "r1", old)
    store.write_rows("trials", "r1", to_table([_row("b", 1, "infra_error", error_class="worker_lost",
                                                    ray_node="n" * 56)], TRIALS_SCHEMA))
    rows = {r["trial_key"]: r for r in store.read_trials("r1").to_pylist()}
    assert rows["a"]["ray_node"] is None and rows["a"]["status"] == "resolved"
    assert rows["b"]["ray_node"] == "n" * 56
