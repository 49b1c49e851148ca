"""The store's small files and paths: run metadata, heartbeats, plans, run listing, artifacts, schemas."""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

from farm.errors import StoreError
from farm.store import PLAN_SCHEMA, ResultStore
from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA, arrow_schema


def test_run_meta_is_readable_json_with_sorted_keys_and_stringified_values(tmp_path: Path):
    store = ResultStore.open(str(tmp_path))
    meta = {"run_id": "r1", "b": 1, "a": {"when": datetime.date(2026, 1, 2), "path": Path("/x")}}
    store.write_run_meta("r1", meta)
    text = (tmp_path / "runs" / "run_id=r1" / "run.json").read_text()
    assert text == '{\n  "a": {\n    "path": "/x",\n    "when": "2026-01-02"\n  },\n  "b": 1,\n  "run_id": "r1"\n}'
    assert store.read_run_meta("r1") == {"run_id": "r1", "b": 1, "a": {"when": "2026-01-02", "path": "/x"}}


def test_an_unreadable_file_is_a_store_error_naming_it(tmp_path: Path):
    store = ResultStore.open(str(tmp_path))
    (tmp_path / "runs" / "run_id=r1" / "run.json").mkdir(parents=True)  # a directory where the file belongs
    with pytest.raises(StoreError, match=r"^cannot read .*run_id=r1/run\.json: "):
        store.read_run_meta("r1")


def test_heartbeat_age(store_uri):
    uri, endpoint = store_uri
    store = ResultStore.open(uri, endpoint)
    assert store.heartbeat_age_s("r1") is None
    store.write_heartbeat("r1", {"pid": 7})
    age = store.heartbeat_age_s("r1")
    assert age is not None and 0.0 <= age < 5.0
    time.sleep(0.3)
    assert store.heartbeat_age_s("r1") >= age + 0.25
    assert store.heartbeat_age_s("other") is None


def test_heartbeat_file_keeps_the_info_and_the_time(tmp_path: Path):
    store = ResultStore.open(str(tmp_path))
    before = time.time()
    store.write_heartbeat("r1", {"pid": 7, "host": "h"})
    data = json.loads((tmp_path / "runs" / "run_id=r1" / "heartbeat.json").read_text())
    assert data["pid"] == 7 and data["host"] == "h" and before <= data["at"] <= time.time()
    (tmp_path / "runs" / "run_id=r1" / "heartbeat.json").write_text(json.dumps({"at": time.time() + 100}))
    assert store.heartbeat_age_s("r1") == 0.0  # a clock ahead of ours is not a negative age


def test_list_runs(tmp_path: Path):
    store = ResultStore.open(str(tmp_path))
    assert store.list_runs() == []
    for rid in ("b", "a=1", "c"):
        store.write_run_meta(rid, {"run_id": rid})
    (tmp_path / "runs" / "not-a-run").mkdir()
    assert store.list_runs() == ["a=1", "b", "c"]


def test_plan_rows_get_the_plan_schema(tmp_path: Path):
    store = ResultStore.open(str(tmp_path))
    store.write_plan("r1", [{"trial_key": "k", "benchmark": "b", "task_id": "t", "seed": 1, "arm": "a"}])
    plan = store.read_plan("r1")
    assert plan.schema == PLAN_SCHEMA
    assert plan.to_pylist() == [{"trial_key": "k", "benchmark": "b", "task_id": "t", "seed": 1, "arm": "a",
                                 "model": None}]
    assert store.read_plan("missing").schema == PLAN_SCHEMA and store.read_plan("missing").num_rows == 0


def test_artifacts_are_kept_per_run_trial_and_attempt(tmp_path: Path):
    store = ResultStore.open(str(tmp_path))
    path = store.write_artifact("r1", "k", 2, "log.txt", b"x")
    assert path == str(tmp_path / "artifacts" / "run_id=r1" / "k" / "2" / "log.txt")
    assert store.read_artifact("r1", "k", 2, "log.txt") == b"x"
    assert store.read_artifact("r2", "k", 2, "log.txt") is None
    assert store.read_artifact("r1", "k", 1, "log.txt") is None


def test_store_open_errors_name_the_uri(tmp_path: Path):
    with pytest.raises(StoreError, match="s3://bucket/prefix"):
        ResultStore.open("s3:///nobucket")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot create store directory"):
        ResultStore.open(str(blocker / "sub"))
    assert ResultStore.open(f"file://{tmp_path}/viaurl").root == str(tmp_path / "viaurl")
    ResultStore.open(str(tmp_path / "nocreate"), create=False)
    assert not (tmp_path / "nocreate").exists()


@dataclass
class _Row:
    a: str
    b: int | None = None
    c: float = 0.0
    d: bool = False
    e: list[str] = field(default_factory=list)
    f: list[float] | None = None


def test_arrow_schema_from_a_dataclass():
    schema = arrow_schema(_Row)
    assert schema == pa.schema([("a", pa.string()), ("b", pa.int64()), ("c", pa.float64()), ("d", pa.bool_()),
                                ("e", pa.list_(pa.string())), ("f", pa.list_(pa.float64()))])


def test_the_store_schemas_have_their_key_columns():
    assert TRIALS_SCHEMA.field("attempt").type == pa.int64() and TRIALS_SCHEMA.field("reward").type == pa.float64()
    assert TRIALS_SCHEMA.field("status").type == pa.string()
    assert STEPS_SCHEMA.field("tool_names").type == pa.list_(pa.string())
    assert STEPS_SCHEMA.field("tool_durations_s").type == pa.list_(pa.float64())


def test_a_missing_bucket_is_named_as_missing(s3_endpoint):
    with pytest.raises(StoreError, match=r"^S3 bucket 'no-such-bucket' does not exist \(store.uri='s3://no-such-bucket/x'\)$"):
        ResultStore.open("s3://no-such-bucket/x", s3_endpoint)


def test_an_unreachable_s3_endpoint_is_named(s3_endpoint):
    from tests.support.endpoints import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(StoreError, match=rf"^cannot reach S3 endpoint '{dead}' for 's3://b/x': "):
        ResultStore.open("s3://b/x", dead)
