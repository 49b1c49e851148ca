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
written" and "driver noticed" can never double-count a trial. S3 operations are retried on
throttling, 5xx, timeouts and resets within ``retry_budget_s`` (farm/store/retry.py); a write
that still fails then, or a local write that cannot land (a full disk), raises StoreWriteError.

    <root>/runs/run_id=<id>/admitted/<trial_key>.<attempt>.json
                                               one per attempt, written before its agent starts:
                                               an admitted attempt with no row was lost
"""

from __future__ import annotations

import contextlib
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

from farm.errors import StoreError, StoreWriteError
from farm.store.retry import one_line, with_retries
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
    retry_budget_s: float = 120.0  # store.retry_budget_s

    @classmethod
    def open(
        cls, uri: str, endpoint_url: str | None = None, region: str | None = None, create: bool = True,
        retry_budget_s: float = 120.0, request_timeout_s: float = 30.0,
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
            # farm retries itself, within a budget (farm/store/retry.py); the SDK's own retries
            # would multiply ours and hide how long a write has been failing
            kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=1)
            kwargs["connect_timeout"] = kwargs["request_timeout"] = request_timeout_s
            try:
                fs = pafs.S3FileSystem(**kwargs)
            except Exception as exc:
                raise StoreError(f"cannot open S3 store {uri!r}: {exc}") from None
            root = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
            store = cls(fs=fs, root=root, uri=uri, is_local=False, retry_budget_s=retry_budget_s)
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
        return cls(fs=pafs.LocalFileSystem(), root=path, uri=uri, is_local=True, retry_budget_s=retry_budget_s)

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

    @property
    def where(self) -> str:
        """What a failure message names: the bucket, or the local directory."""
        if self.is_local:
            return f"directory {self.root!r}"
        return f"S3 bucket {self.root.split('/', 1)[0]!r}"

    def _io(self, fn: Any, what: str, budget_s: float | None = None) -> Any:
        """``fn()`` with S3's transient failures retried (a local filesystem has none)."""
        if self.is_local:
            return fn()
        return with_retries(fn, budget_s=self.retry_budget_s if budget_s is None else budget_s,
                            where=self.where, what=what)

    def _put(self, path: str, data: bytes, budget_s: float | None = None) -> None:
        """Commit ``data`` at ``path`` whole or not at all; a retry puts the same bytes at the same key.

        Raises:
            StoreWriteError: the bytes could not land (S3 past the retry budget, a full disk).
        """
        parent = path.rsplit("/", 1)[0]
        if self.is_local:
            tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
            try:
                self._ensure_dir(parent)
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    # fsync before the rename: a name that survives a crash never points at a torn file
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)  # a full disk keeps no torn temp file (and gets its space back)
                raise StoreWriteError(f"store {self.where}: cannot write {path}: {one_line(exc)}") from None
            return

        def put() -> None:
            # one PUT (or a multipart upload completed at close): an object appears whole or not at all
            with self.fs.open_output_stream(path) as f:
                f.write(data)

        try:
            self._io(put, f"write {path}", budget_s)
        except StoreWriteError:
            raise
        except StoreError as exc:
            raise StoreWriteError(str(exc)) from None

    def _get(self, path: str) -> bytes | None:
        def get() -> bytes | None:
            try:
                with self.fs.open_input_stream(path) as f:
                    return f.read()
            except FileNotFoundError:  # pyarrow raises it for a missing local file and S3 key alike
                return None

        try:
            return self._io(get, f"read {path}")
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
        # a missed beat only makes gc more eager: not worth holding the driver's exit for the budget
        self._put(f"{self._dir('runs', run_id)}/heartbeat.json", json.dumps({**info, "at": time.time()}).encode(),
                  budget_s=min(self.retry_budget_s, 5.0))

    def heartbeat_age_s(self, run_id: str) -> float | None:
        data = self._get(f"{self._dir('runs', run_id)}/heartbeat.json")
        if data is None:
            return None
        return max(0.0, time.time() - float(json.loads(data)["at"]))

    # -- admissions ------------------------------------------------------------------------
    def admit(self, run_id: str, trial_key: str, attempt: int, info: dict[str, Any] | None = None) -> None:
        """Record that ``attempt`` of ``trial_key`` is about to start its agent (before it does).

        An admitted attempt that never gets a row was lost (the driver died, the run was
        stopped): resume records it as ``infra_error:attempt_lost`` before drawing another, so
        no agent run disappears from the ledger (farm/run/driver.py)."""
        blob = json.dumps({"trial_key": trial_key, "attempt": attempt, "at": time.time(), **(info or {})}).encode()
        self._put(f"{self._dir('runs', run_id)}/admitted/{trial_key}.{attempt}.json", blob)

    def read_admitted(self, run_id: str) -> set[tuple[str, int]]:
        """Every admitted (trial_key, attempt) of the run, from the names of the admission files."""
        base = f"{self._dir('runs', run_id)}/admitted"
        try:
            infos = self._io(lambda: self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True)),
                             f"list {base}")
        except OSError as exc:
            raise StoreError(f"cannot list {base}: {exc}") from None
        out = set()
        for info in infos:
            key, _, rest = info.base_name.partition(".")
            attempt = rest.removesuffix(".json")
            if not info.base_name.startswith(".") and rest.endswith(".json") and attempt.isdigit():
                out.add((key, int(attempt)))
        return out

    def list_runs(self) -> list[str]:
        try:
            infos = self._io(lambda: self.fs.get_file_info(pafs.FileSelector(f"{self.root}/runs",
                                                                             allow_not_found=True)), "list runs")
        except (OSError, StoreError):
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
    def write_rows(self, table_name: str, run_id: str, table: pa.Table, token: str | None = None) -> str:
        """Commit one Parquet file of rows (a batch) for a run; returns its path.

        ``token`` names the file: a batch written again after a failure passes the same one, so
        that a PUT which landed although its answer was lost is overwritten, not duplicated."""
        if table.num_rows == 0:
            return ""
        if "run_id" in table.column_names:
            table = table.drop_columns(["run_id"])
        name = f"part-{token or new_token()}.parquet"
        path = f"{self._dir(table_name, run_id)}/{name}"
        self._put(path, _parquet_bytes(table))
        return path

    def _read(self, table_name: str, run_id: str) -> pa.Table:
        schema = _without_run_id(TABLE_SCHEMAS[table_name])
        base = self._dir(table_name, run_id)

        def read_all() -> list[pa.Table]:
            infos = self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
            files = sorted(i.path for i in infos
                           if i.base_name.endswith(".parquet") and not i.base_name.startswith("."))
            return [pq.read_table(path, filesystem=self.fs) for path in files]

        try:
            raw = self._io(read_all, f"read {base}")
        except OSError as exc:
            raise StoreError(f"cannot list {base}: {exc}") from None
        tables = []
        for t in raw:
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


def new_token() -> str:
    """A batch file's name: time-ordered, unique across writers."""
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"


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
