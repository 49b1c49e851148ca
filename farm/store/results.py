"""ResultStore: Parquet tables and artifacts of runs, on a local directory or S3.

Layout (Hive-partitioned, so DuckDB / pandas / Spark read it without farm)::

    <root>/runs/run_id=<id>/run.json           config, config hash, versions
    <root>/runs/run_id=<id>/plan.parquet       every scheduled trial (the denominators)
    <root>/trials/run_id=<id>/part-*.parquet   one row per finished attempt
    <root>/steps/run_id=<id>/part-*.parquet    one row per model call
    <root>/artifacts/run_id=<id>/<trial_key>/<attempt>/<name>

``run_id`` lives in the directory name only: a column with the same name inside the files
would clash with the partition column in pyarrow's dataset reader.

Every file is committed atomically (temp + rename locally; a single object PUT on S3), and
readers de-duplicate trials by ``trial_key`` (latest attempt wins), so a crash between "file
written" and "driver noticed" can never double-count a trial.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from farm.errors import StoreError
from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA

PLAN_SCHEMA = pa.schema(
    [
        ("trial_key", pa.string()),
        ("benchmark", pa.string()),
        ("task_id", pa.string()),
        ("seed", pa.int64()),
        ("arm", pa.string()),
        ("model", pa.string()),
    ]
)
TABLE_SCHEMAS = {"trials": TRIALS_SCHEMA, "steps": STEPS_SCHEMA}


def _without_run_id(schema: pa.Schema) -> pa.Schema:
    idx = schema.get_field_index("run_id")
    return schema.remove(idx) if idx >= 0 else schema


@dataclass
class ResultStore:
    fs: pafs.FileSystem
    root: str  # path inside ``fs`` (bucket/prefix for S3)
    uri: str
    is_local: bool

    @classmethod
    def open(
        cls, uri: str, endpoint_url: str | None = None, region: str | None = None, create: bool = True
    ) -> ResultStore:
        parsed = urlparse(uri)
        if parsed.scheme == "s3":
            if not parsed.netloc:
                raise StoreError(f"invalid value {uri!r} for 'store.uri': expected s3://bucket/prefix")
            kwargs: dict[str, Any] = {"region": region or os.environ.get("AWS_REGION", "us-east-1")}
            if endpoint_url:
                ep = urlparse(endpoint_url)
                kwargs["endpoint_override"] = ep.netloc or endpoint_url
                kwargs["scheme"] = ep.scheme or "http"
            try:
                fs = pafs.S3FileSystem(**kwargs)
            except Exception as exc:
                raise StoreError(f"cannot open S3 store {uri!r}: {exc}") from None
            root = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
            store = cls(fs=fs, root=root, uri=uri, is_local=False)
            if create:
                store._check_bucket(parsed.netloc, endpoint_url, kwargs["region"])
            return store
        if parsed.scheme not in ("", "file"):
            raise StoreError(f"invalid value {uri!r} for 'store.uri': use a directory or s3://bucket/prefix")
        path = os.path.abspath(os.path.expanduser(parsed.path if parsed.scheme == "file" else uri))
        if create:
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create store directory {path!r}: {exc}") from None
        return cls(fs=pafs.LocalFileSystem(), root=path, uri=uri, is_local=True)

    def _check_bucket(self, bucket: str, endpoint_url: str | None, region: str) -> None:
        """Fail early, naming the bucket, instead of on the first write an hour into a run."""
        try:
            import boto3
            import botocore.exceptions
        except ImportError:  # pragma: no cover - boto3 is in the s3 extra
            return
        client = boto3.client("s3", endpoint_url=endpoint_url, region_name=region)
        try:
            client.head_bucket(Bucket=bucket)
        except botocore.exceptions.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchBucket", "NotFound"):
                raise StoreError(f"S3 bucket {bucket!r} does not exist (store.uri={self.uri!r})") from None
            raise StoreError(f"cannot access S3 bucket {bucket!r}: {exc}") from None
        except botocore.exceptions.BotoCoreError as exc:
            raise StoreError(f"cannot reach S3 endpoint {endpoint_url!r} for {self.uri!r}: {exc}") from None

    # -- paths -------------------------------------------------------------------------
    def _dir(self, table: str, run_id: str) -> str:
        return f"{self.root}/{table}/run_id={run_id}"

    def _ensure_dir(self, path: str) -> None:
        if self.is_local:
            self.fs.create_dir(path, recursive=True)

    def _put(self, path: str, data: bytes) -> None:
        parent = path.rsplit("/", 1)[0]
        try:
            self._ensure_dir(parent)
            if self.is_local:
                tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    # fsync before the rename: a name that survives a crash never points at a torn file
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            else:
                with self.fs.open_output_stream(path) as f:
                    f.write(data)
        except OSError as exc:
            raise StoreError(f"cannot write {path}: {exc}") from None

    def _get(self, path: str) -> bytes | None:
        try:
            with self.fs.open_input_stream(path) as f:
                return f.read()
        except FileNotFoundError:  # pyarrow raises it for a missing local file and S3 key alike
            return None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc}") from None

    # -- runs --------------------------------------------------------------------------
    def write_run_meta(self, run_id: str, meta: dict[str, Any]) -> None:
        blob = json.dumps(meta, indent=2, sort_keys=True, default=str).encode()
        self._put(f"{self._dir('runs', run_id)}/run.json", blob)

    def read_run_meta(self, run_id: str) -> dict[str, Any] | None:
        data = self._get(f"{self._dir('runs', run_id)}/run.json")
        return json.loads(data) if data is not None else None

    def write_heartbeat(self, run_id: str, info: dict[str, Any]) -> None:
        """The driver's liveness signal: `farm gc` treats runs without a fresh one as dead."""
        self._put(f"{self._dir('runs', run_id)}/heartbeat.json", json.dumps({**info, "at": time.time()}).encode())

    def heartbeat_age_s(self, run_id: str) -> float | None:
        data = self._get(f"{self._dir('runs', run_id)}/heartbeat.json")
        if data is None:
            return None
        return max(0.0, time.time() - float(json.loads(data)["at"]))

    def list_runs(self) -> list[str]:
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(f"{self.root}/runs", allow_not_found=True))
        except OSError:
            return []
        return sorted(i.base_name.split("=", 1)[1] for i in infos if i.base_name.startswith("run_id="))

    def write_plan(self, run_id: str, rows: list[dict[str, Any]]) -> None:
        table = pa.Table.from_pylist(rows, schema=PLAN_SCHEMA)
        self._put(f"{self._dir('runs', run_id)}/plan.parquet", _parquet_bytes(table))

    def read_plan(self, run_id: str) -> pa.Table:
        data = self._get(f"{self._dir('runs', run_id)}/plan.parquet")
        if data is None:
            return PLAN_SCHEMA.empty_table()
        return pq.read_table(pa.BufferReader(data))

    # -- tables ------------------------------------------------------------------------
    def write_rows(self, table_name: str, run_id: str, table: pa.Table) -> str:
        """Commit one Parquet file of rows (a batch) for a run; returns its path."""
        if table.num_rows == 0:
            return ""
        if "run_id" in table.column_names:
            table = table.drop_columns(["run_id"])
        name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        path = f"{self._dir(table_name, run_id)}/{name}"
        self._put(path, _parquet_bytes(table))
        return path

    def _read(self, table_name: str, run_id: str) -> pa.Table:
        schema = _without_run_id(TABLE_SCHEMAS[table_name])
        base = self._dir(table_name, run_id)
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        except OSError as exc:
            raise StoreError(f"cannot list {base}: {exc}") from None
        files = sorted(i.path for i in infos if i.base_name.endswith(".parquet") and not i.base_name.startswith("."))
        tables = []
        for path in files:
            t = pq.read_table(path, filesystem=self.fs)
            # Files written by older farm versions may lack newer columns: add them as nulls.
            for fld in schema:
                if fld.name not in t.column_names:
                    t = t.append_column(fld, pa.nulls(t.num_rows, fld.type))
            tables.append(t.select(schema.names).cast(schema))
        table = pa.concat_tables(tables) if tables else schema.empty_table()
        return table.append_column("run_id", pa.array([run_id] * table.num_rows, pa.string()))

    def read_trials(self, run_id: str, dedupe: bool = True) -> pa.Table:
        table = self._read("trials", run_id)
        return latest_attempts(table) if dedupe else table

    def read_steps(self, run_id: str) -> pa.Table:
        return self._read("steps", run_id)

    # -- artifacts ---------------------------------------------------------------------
    def artifact_path(self, run_id: str, trial_key: str, attempt: int, name: str) -> str:
        return f"{self._dir('artifacts', run_id)}/{trial_key}/{attempt}/{name}"

    def write_artifact(self, run_id: str, trial_key: str, attempt: int, name: str, data: bytes) -> str:
        path = self.artifact_path(run_id, trial_key, attempt, name)
        self._put(path, data)
        return path

    def read_artifact(self, run_id: str, trial_key: str, attempt: int, name: str) -> bytes | None:
        return self._get(self.artifact_path(run_id, trial_key, attempt, name))


def latest_attempts(table: pa.Table) -> pa.Table:
    """One row per trial_key: the highest attempt (ties: the latest finished_at)."""
    if table.num_rows == 0:
        return table
    idx = pa.array(range(table.num_rows), pa.int64())
    order = pc.sort_indices(
        table.append_column("_i", idx),
        sort_keys=[("trial_key", "ascending"), ("attempt", "descending"), ("finished_at", "descending"),
                   ("_i", "descending")],
    )
    sorted_t = table.take(order)
    keys = sorted_t.column("trial_key").to_pylist()
    keep = [i for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    return sorted_t.take(pa.array(keep, pa.int64()))


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()
