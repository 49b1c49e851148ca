"""What the viewer reads from a run: its trials once, a trial's steps and artifacts on demand.

The trials table (one row per attempt) is small next to the steps table (one row per model
call, with every message), so it is read once; a trial's steps are read only when its page is
drawn. A step index (``trial_key``/``attempt_uid`` -> the Parquet files that hold them) is built
from three columns on the first trial page, so one trial's page opens the one or two files the
batch writer put its steps in instead of scanning the whole steps table.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from farm.errors import StoreError
from farm.store.results import ResultStore, latest_attempts
from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA

# Columns of the run table (and of trials.js): what the filters and the list need, nothing more.
LIST_COLUMNS = ("trial_key", "benchmark", "task_id", "seed", "arm", "policy", "model_preset", "status", "reward",
                "exit_reason", "error_class", "steps", "tool_calls", "prompt_tokens", "completion_tokens", "wall_s",
                "hack_flags", "tamper_suspect", "attempt")
# Artifacts shown in their own sections, in this order; any other artifact is listed after them.
PATCH, VERIFIER = "patch.diff", "verifier.txt"
_SAFE_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
# Steps files kept decoded: a batch holds ~64 trials, so a static site reads each file once
# when it walks the trials in file order, and a served page next to the last one is a cache hit.
FILE_CACHE = 8


class ViewError(StoreError):
    """The run, a trial or a page the viewer was asked for does not exist."""


def page_name(trial_key: str) -> str:
    """The file name (without .html) of a trial's page: the key itself when it is a safe file
    name (farm's keys are hex), otherwise a digest of it (keys of imported runs may hold '/' or ':')."""
    if _SAFE_KEY.fullmatch(trial_key):
        return trial_key
    return "k" + hashlib.sha1(trial_key.encode()).hexdigest()[:24]


def cell_name(benchmark: str, task_id: str, seed: int) -> str:
    """The file name of the side-by-side page of one (benchmark, task, seed)."""
    return hashlib.sha1(json.dumps([benchmark, task_id, int(seed)]).encode()).hexdigest()[:20]


def flags_of(row: dict[str, Any]) -> list[str]:
    """The scanner's rule names for a trial (``read_tests@3`` -> ``read_tests``), plus
    ``tamper_suspect`` when grade.mode=both found it resolved in place only."""
    rules = sorted({str(f).split("@", 1)[0] for f in row.get("hack_flags") or []})
    return rules + (["tamper_suspect"] if row.get("tamper_suspect") else [])


@dataclass
class ReadStats:
    """What was read from the steps table, so a test can tell a page that opened one trial's
    steps from one that read them all."""

    index_rows: int = 0  # rows of the three-column step index
    step_rows: int = 0  # full step rows (with messages) decoded
    step_files: int = 0  # steps files opened for full rows


@dataclass
class RunView:
    """One run of a result store, as the viewer reads it."""

    store: ResultStore
    run_id: str
    meta: dict[str, Any]
    attempts: pa.Table  # every attempt
    trials: pa.Table  # the latest attempt of each trial_key
    stats: ReadStats = field(default_factory=ReadStats)
    _index: dict[str, list[str]] | None = None
    _cells: dict[tuple[str, str, int], str] | None = None
    _attempt_rows: dict[str, list[int]] | None = None
    _files: OrderedDict[str, pa.Table] = field(default_factory=OrderedDict)
    _by_page: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, store: ResultStore, run_id: str) -> RunView:
        """Raises:
            ViewError: the store holds no run ``run_id``.
        """
        meta = store.read_run_meta(run_id)
        if meta is None:
            raise ViewError(f"no run {run_id!r} in {store.uri} (known: {store.list_runs()[:20]})")
        attempts = _read_attempts(store, run_id)
        trials = latest_attempts(attempts)
        order = pc.sort_indices(trials, sort_keys=[("benchmark", "ascending"), ("task_id", "ascending"),
                                                   ("seed", "ascending"), ("arm", "ascending")])
        trials = trials.take(order)
        view = cls(store=store, run_id=run_id, meta=meta, attempts=attempts, trials=trials)
        view._by_page = {page_name(k): i for i, k in enumerate(trials.column("trial_key").to_pylist())}
        return view

    # -- trials ------------------------------------------------------------------------
    def list_rows(self) -> dict[str, Any]:
        """The run table as columns (the shape trials.js holds): {"columns": [...], "rows": [[...]]}."""
        cols = [c for c in LIST_COLUMNS if c in self.trials.column_names]
        data = {c: self.trials.column(c).to_pylist() for c in cols}
        for c in cols:
            if pa.types.is_floating(self.trials.schema.field(c).type):
                data[c] = [None if v is None or v != v else round(v, 4) for v in data[c]]
        cells = list(zip(data["benchmark"], data["task_id"], data["seed"]))
        names = self.cells()
        pages = [page_name(k) for k in data["trial_key"]]
        flags = [flags_of({"hack_flags": h, "tamper_suspect": t})
                 for h, t in zip(data["hack_flags"], data["tamper_suspect"])]
        rows = [list(r) for r in zip(*(data[c] for c in cols), pages, [names.get(c) for c in cells], flags)]
        return {"columns": [*cols, "page", "cell", "flags"], "rows": rows}

    def trial_by_page(self, name: str) -> dict[str, Any]:
        """Raises:
            ViewError: no trial of this run has the page ``name``.
        """
        i = self._by_page.get(name)
        if i is None:
            raise ViewError(f"run {self.run_id!r}: no trial page {name!r}")
        return self.trials.slice(i, 1).to_pylist()[0]

    def attempts_of(self, trial: dict[str, Any]) -> list[dict[str, Any]]:
        """Every attempt of ``trial`` (a latest-attempt row), oldest first."""
        with self._lock:
            if self._attempt_rows is None:  # built once: a filter of the whole table per page adds up
                self._attempt_rows = {}
                for i, key in enumerate(self.attempts.column("trial_key").to_pylist()):
                    self._attempt_rows.setdefault(key, []).append(i)
        index = self._attempt_rows.get(trial["trial_key"], [])
        if len(index) <= 1:  # no retries: the row is the trial itself
            return [trial]
        rows = self.attempts.take(pa.array(index, pa.int64())).to_pylist()
        return sorted(rows, key=lambda r: (r.get("attempt") or 0, r.get("finished_at") or 0.0))

    def cell(self, name: str) -> list[dict[str, Any]]:
        """The latest trials of every arm on one (benchmark, task, seed), by arm.

        Raises:
            ViewError: no two arms of this run share the cell ``name``.
        """
        for (b, t, s), cell in self.cells().items():
            if cell == name:
                mask = pc.and_(pc.and_(pc.equal(self.trials.column("benchmark"), b),
                                       pc.equal(self.trials.column("task_id"), t)),
                               pc.equal(self.trials.column("seed"), s))
                return sorted(self.trials.filter(mask).to_pylist(), key=lambda r: r["arm"])
        raise ViewError(f"run {self.run_id!r}: no side-by-side page {name!r}")

    def cells(self) -> dict[tuple[str, str, int], str]:
        """Every (benchmark, task, seed) that more than one arm ran, with its page name."""
        if self._cells is None:
            arms: dict[tuple[str, str, int], set[str]] = {}
            cols = [self.trials.column(c).to_pylist() for c in ("benchmark", "task_id", "seed", "arm")]
            for b, t, s, arm in zip(*cols):
                arms.setdefault((b, t, s), set()).add(arm)
            self._cells = {c: cell_name(*c) for c in sorted(c for c, a in arms.items() if len(a) > 1)}
        return self._cells

    # -- steps -------------------------------------------------------------------------
    def _step_index(self) -> dict[str, list[str]]:
        """attempt_uid (or "trial_key/attempt" for rows without one) -> the files holding its steps."""
        with self._lock:
            if self._index is not None:
                return self._index
            files = table_files(self.store, "steps", self.run_id)
            index: dict[str, list[str]] = {}
            if files:
                dataset = ds.dataset(files, filesystem=self.store.fs, format="parquet",
                                     schema=file_schema(STEPS_SCHEMA))
                table = dataset.to_table(columns=["trial_key", "attempt", "attempt_uid", "__filename"])
                self.stats.index_rows += table.num_rows
                seen: set[tuple[str, str]] = set()
                for key, att, uid, fname in zip(*(table.column(c).to_pylist() for c in
                                                  ("trial_key", "attempt", "attempt_uid", "__filename"))):
                    ident = uid or f"{key}/{att}"
                    if (ident, fname) not in seen:
                        seen.add((ident, fname))
                        index.setdefault(ident, []).append(fname)
            self._index = index
            return index

    def first_steps_file(self, trial: dict[str, Any]) -> str:
        """The first file holding ``trial``'s steps ('' for none): a static site walks trials in
        this order so that every steps file is decoded once."""
        files = self._step_index().get(_ident(trial))
        return files[0] if files else ""

    def _file(self, path: str) -> pa.Table:
        with self._lock:
            if path in self._files:
                self._files.move_to_end(path)
                return self._files[path]
        table = ds.dataset([path], filesystem=self.store.fs, format="parquet",
                           schema=file_schema(STEPS_SCHEMA)).to_table()
        with self._lock:
            self.stats.step_files += 1
            self._files[path] = table
            while len(self._files) > FILE_CACHE:
                self._files.popitem(last=False)
        return table

    def steps_of(self, trial: dict[str, Any]) -> list[dict[str, Any]]:
        """The steps of ``trial``'s attempt, in order, each with its messages parsed (``messages``)."""
        ident = _ident(trial)
        rows: list[dict[str, Any]] = []
        for path in self._step_index().get(ident, []):
            table = self._file(path)
            if trial.get("attempt_uid"):
                mask = pc.equal(table.column("attempt_uid"), trial["attempt_uid"])
            else:
                mask = pc.and_(pc.equal(table.column("trial_key"), trial["trial_key"]),
                               pc.equal(table.column("attempt"), trial["attempt"]))
            part = table.filter(mask).to_pylist()
            with self._lock:
                self.stats.step_rows += len(part)
            rows += part
        rows.sort(key=lambda r: r["step"])
        for r in rows:
            try:
                r["messages"] = json.loads(r.get("messages_json") or "[]")
            except json.JSONDecodeError:  # shown as text rather than hiding the step
                r["messages"] = [{"role": "unparsed", "content": r.get("messages_json")}]
        return rows

    # -- artifacts ---------------------------------------------------------------------
    def artifacts_of(self, trial: dict[str, Any]) -> list[str]:
        """Names of the artifacts of ``trial``'s attempt: patch and verifier output first."""
        base = self.store.artifact_path(self.run_id, trial["trial_key"], trial["attempt"], "").rstrip("/")
        try:
            infos = self.store.fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        except OSError as exc:
            raise StoreError(f"cannot list {base}: {exc}") from None
        names = sorted(i.path[len(base) + 1:] for i in infos
                       if i.type == pafs.FileType.File and not i.base_name.startswith(".tmp-"))
        first = [n for n in (PATCH, VERIFIER) if n in names]
        return first + [n for n in names if n not in first]

    def artifact(self, trial: dict[str, Any], name: str) -> bytes | None:
        return self.store.read_artifact(self.run_id, trial["trial_key"], trial["attempt"], name)


def _ident(trial: dict[str, Any]) -> str:
    return trial.get("attempt_uid") or f"{trial['trial_key']}/{trial['attempt']}"


def file_schema(schema: pa.Schema) -> pa.Schema:
    """A table's schema as its files hold it: run_id is the partition directory, not a column."""
    # files of older farm versions may lack newer columns: an explicit schema reads them as nulls
    return schema.remove(schema.get_field_index("run_id"))


def table_files(store: ResultStore, table: str, run_id: str) -> list[str]:
    """The committed Parquet files of one table of a run (docs/architecture.md "Store layout")."""
    base = f"{store.root}/{table}/run_id={run_id}"
    try:
        infos = store.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except OSError as exc:
        raise StoreError(f"cannot list {base}: {exc}") from None
    return sorted(i.path for i in infos if i.base_name.endswith(".parquet") and not i.base_name.startswith("."))


def _read_attempts(store: ResultStore, run_id: str) -> pa.Table:
    """Every attempt of the run: one dataset scan (files read in parallel), not a file at a time."""
    files = table_files(store, "trials", run_id)
    if not files:
        return file_schema(TRIALS_SCHEMA).empty_table()
    try:
        return ds.dataset(files, filesystem=store.fs, format="parquet", schema=file_schema(TRIALS_SCHEMA)).to_table()
    except (OSError, pa.ArrowInvalid) as exc:
        raise StoreError(f"cannot read the trials of run {run_id!r}: {exc}") from None

