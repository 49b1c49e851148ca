"""The single writer of a run: batches trial and step rows into few Parquet files.

One file per trial would mean thousands of tiny objects on S3 (slow to list, slow to read);
one writer per run batches rows and commits a file when ``batch_rows`` trials are buffered or
``flush_interval_s`` has passed. Steps of a batch are committed before its trials, so a trial
row that exists always has its steps; a crash loses only unflushed rows, whose trials are then
simply not finished and get re-run on resume (never double-counted).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from farm.store.results import ResultStore
from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA, StepRow, TrialResult, to_table


@dataclass
class WriterStats:
    files: int = 0
    trials: int = 0
    steps: int = 0
    flushes: int = 0
    errors: list[str] = field(default_factory=list)


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
        """Commit everything buffered; returns the number of trial rows committed."""
        with self._lock:
            trials, steps = self._trials, self._steps
            self._trials, self._steps = [], []
            self._last_flush = time.monotonic()
            if not trials and not steps:
                return 0
            steps_done = False
            try:
                if steps:
                    self.store.write_rows("steps", self.run_id, to_table(steps, STEPS_SCHEMA))
                    self.stats.files += 1
                    self.stats.steps += len(steps)
                steps_done = True
                if trials:
                    self.store.write_rows("trials", self.run_id, to_table(trials, TRIALS_SCHEMA))
                    self.stats.files += 1
            except Exception:
                # keep the rows so that a later flush retries them; the caller sees the error.
                # Steps already committed are not written twice: their trials still follow them.
                self._trials = trials + self._trials
                if not steps_done:
                    self._steps = steps + self._steps
                raise
            self.stats.trials += len(trials)
            self.stats.flushes += 1
            return len(trials)

    def pending(self) -> int:
        with self._lock:
            return len(self._trials)

    def close(self) -> None:
        self.flush()
