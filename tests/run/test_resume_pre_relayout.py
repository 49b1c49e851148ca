"""A run started before the re-layout of issue 25 resumes after it without re-running anything
it had finished (tests/fixtures/resume/README.md says how the store was made).

A resume keys on the run's stored config hash and on the trial keys in its plan: if a refactor
changed either, every run in flight when farm was upgraded would be refused or run twice."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from farm.config import load_config
from farm.run.driver import run_experiment
from farm.store import ResultStore

# the trials run in local (bubblewrap) sandboxes
pytestmark = pytest.mark.bwrap

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "resume" / "pre-relayout"
RUN_ID = "pre-relayout"
# the command line that made the store, less the store's own place
OVERRIDES = ["agent=oracle", "benchmark.task_ids=[swe-paginate-off-by-one,term-dedupe-inbox,swe-memoize-cache-key]",
             "run.seeds=2", f"run.id={RUN_ID}", "store.batch_rows=1", "run.executor=local"]


def _trial_files(store: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (store / "trials" / f"run_id={RUN_ID}").glob("*.parquet")}


def test_a_run_started_before_the_relayout_finishes_without_re_running_anything(tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(FIXTURE, store)
    before = _trial_files(store)
    trials = store / "trials" / f"run_id={RUN_ID}"
    finished = {r["trial_key"] for f in before for r in pq.read_table(trials / f).to_pylist()}
    assert len(finished) == 4

    summary = asyncio.run(run_experiment(load_config([*OVERRIDES, f"store.uri={store}"])))

    # the stored config hash matched (a mismatch raises ConfigError) and only the two missing trials ran
    assert (summary.planned, summary.skipped, summary.executed_attempts) == (6, 4, 2)
    assert summary.counts == {"resolved": 2}
    after = _trial_files(store)
    assert {k: v for k, v in after.items() if k in before} == before  # the old rows are untouched
    rows = ResultStore.open(str(store)).read_trials(RUN_ID, dedupe=False).to_pylist()
    assert len(rows) == 6 and len({r["trial_key"] for r in rows}) == 6  # each trial exactly once
    new = [r for r in rows if r["trial_key"] not in finished]
    assert sorted((r["task_id"], r["seed"], r["attempt"]) for r in new) == [
        ("swe-memoize-cache-key", 0, 1), ("term-dedupe-inbox", 1, 1)]
    assert {r["config_hash"] for r in rows} == {summary.config_hash}
