"""The single writer of a run: batches trial and step rows into few Parquet files.

One file per trial would mean thousands of tiny objects on S3 (slow to list, slow to read);
one writer per run batches rows and commits a file when ``batch_rows`` trials are buffered or
``flush_interval_s`` has passed. Steps of a batch are committed before its trials, so a trial
row that exists always has its steps; a crash loses only unflushed rows, whose trials are then
simply not finished and get re-run on resume (never double-counted).

A batch that failed to commit keeps its file name (its token) and its rows: the next flush
writes exactly the same files again, so a PUT that landed although its answer was lost is
overwritten, never duplicated. Once S3 gave up for good (StoreWriteError: past
``store.retry_budget_s``) the writer is broken: later flushes raise the same error
at once instead of waiting out the budget again while the run stops.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from farm.errors import StoreWriteError
from farm.store.results import ResultStore, new_token
from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA, StepRow, TrialResult, to_table


@dataclass
class WriterStats:
    files: int = 0
    trials: int = 0
    steps: int = 0
    flushes: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class _Batch:
    token: str  # names its steps file and its trials file, the same on every try
    trials: list[TrialResult]
    steps: list[StepRow]
    steps_done: bool = False


class BatchWriter:
    """Thread-safe batching writer for one run."""

    def __init__(self, store: ResultStore, run_id: str, batch_rows: int = 64, flush_interval_s: float = 5.0):
        self.store = store
        self.run_id = run_id
        self.batch_rows = batch_rows
        self.flush_interval_s = flush_interval_s
        self._trials: list[TrialResult] = []
        self._steps: list[StepRow] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._failed: list[_Batch] = []  # batches whose commit failed, retried first, unchanged
        self.broken: StoreWriteError | None = None
        self.stats = WriterStats()

    def add(self, result: TrialResult, steps: list[StepRow] | None = None) -> bool:
        """Buffer one finished attempt; returns True if this call committed a file."""
        with self._lock:
            self._trials.append(result)
            self._steps.extend(steps or [])
            due = len(self._trials) >= self.batch_rows or (
                time.monotonic() - self._last_flush >= self.flush_interval_s
            )
        if due:
            self.flush()
            return True
        return False

    def flush(self) -> int:
        """Commit everything buffered; returns the number of trial rows committed.

        Raises:
            StoreWriteError: the store gave up (now or on an earlier flush); the rows stay buffered.
        """
        with self._lock:
            if self.broken is not None:
                raise self.broken
            batches = self._failed
            if self._trials or self._steps:
                batches = [*batches, _Batch(new_token(), self._trials, self._steps)]
            self._trials, self._steps, self._failed = [], [], []
            self._last_flush = time.monotonic()
            committed = 0
            for n, batch in enumerate(batches):
                try:
                    self._commit(batch)
                except Exception as exc:
                    # keep this batch and the ones after it, as they are, for a later flush
                    self._failed = batches[n:]
                    if isinstance(exc, StoreWriteError) and not self.store.is_local:
                        self.broken = exc  # S3 past its retry budget: do not wait it out again
                    raise
                committed += len(batch.trials)
            if batches:
                self.stats.flushes += 1
            return committed

    def _commit(self, batch: _Batch) -> None:
        if batch.steps and not batch.steps_done:
            self.store.write_rows("steps", self.run_id, to_table(batch.steps, STEPS_SCHEMA), token=batch.token)
            self.stats.files += 1
            self.stats.steps += len(batch.steps)
        batch.steps_done = True  # steps committed are not written again: their trials still follow them
        if batch.trials:
            self.store.write_rows("trials", self.run_id, to_table(batch.trials, TRIALS_SCHEMA), token=batch.token)
            self.stats.files += 1
        self.stats.trials += len(batch.trials)

    def pending(self) -> int:
        with self._lock:
            return len(self._trials) + sum(len(b.trials) for b in self._failed)

    def close(self) -> None:
        self.flush()
