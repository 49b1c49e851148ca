"""run.order=longest_first (farm/run/order.py): expected-longest tasks start first, one task's
trials together; the expectation comes from earlier runs in the store, else the task's timeouts."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from farm.config import config_hash, load_config
from farm.errors import ConfigError
from farm.run.driver import run_experiment
from farm.run.order import expected_duration, order_trials, prior_durations, store_priors
from farm.run.plan import TrialSpec
from farm.store.results import ResultStore
from tests.support.tasks import CHECK_ANSWER, make_task, make_task_dir


def _tasks(timeouts: dict[str, float]):
    return {("conformance", name): dataclasses.replace(make_task(task_id=name), agent_timeout_s=t,
                                                        verifier_timeout_s=10.0)
            for name, t in timeouts.items()}


def _todo(names: list[str], seeds: int = 2) -> list[TrialSpec]:
    return [TrialSpec("r", f"{n}-{s}", "conformance", n, s, "base", "oracle") for n in names for s in range(seeds)]


def test_longest_first_by_timeout_keeps_a_tasks_seeds_together() -> None:
    tasks = _tasks({"short": 60, "long": 900, "mid": 300, "mid2": 300})
    todo = _todo(["short", "long", "mid", "mid2"])
    out = order_trials(todo, tasks, "longest_first")
    assert [s.trial_key for s in out] == ["long-0", "long-1", "mid-0", "mid-1", "mid2-0", "mid2-1",
                                          "short-0", "short-1"]  # the tie mid/mid2 keeps dataset order
    assert order_trials(todo, tasks, "dataset") == todo


def test_a_prior_from_earlier_runs_beats_the_timeout_and_the_agent_budget_caps_it() -> None:
    tasks = _tasks({"a": 900, "b": 60})
    priors = {("conformance", "b"): 500.0, ("conformance", "a"): 20.0}
    out = order_trials(_todo(["a", "b"], 1), tasks, "longest_first", priors=priors)
    assert [s.task_id for s in out] == ["b", "a"]
    assert expected_duration(tasks[("conformance", "a")], {}, 100.0) == (110.0, "timeout")
    assert expected_duration(tasks[("conformance", "b")], {("conformance", "b"): 7.0}, None) == (7.0, "prior")


def test_priors_are_medians_of_attempts_that_ran() -> None:
    rows = [{"benchmark": "b", "task_id": "t", "status": s, "wall_s": w}
            for s, w in (("resolved", 10.0), ("unresolved", 30.0), ("resolved", 20.0), ("infra_error", 999.0),
                         ("resolved", None))]
    assert prior_durations(rows) == {("b", "t"): 20.0}


def test_order_is_validated_and_not_hashed() -> None:
    with pytest.raises(ConfigError, match="run.order"):
        load_config(["run.order=shortest"])
    assert config_hash(load_config(["run.order=longest_first"])) == config_hash(load_config([]))


@pytest.mark.integration
def test_a_real_run_starts_the_longest_task_first_and_feeds_the_next_runs_priors(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    for name, timeout in (("t-short", 60), ("t-long", 600), ("t-mid", 200)):
        d = make_task_dir(root, name, CHECK_ANSWER)
        toml = d / "task.toml"
        toml.write_text(toml.read_text().replace("timeout_sec = 60", f"timeout_sec = {timeout}"))
    store = tmp_path / "store"
    cfg = load_config([f"benchmark.path={root}", "agent=oracle", "run.order=longest_first", "run.seeds=2",
                       "run.executor=local", "run.max_in_flight=1", "run.preflight_sandbox=false",
                       f"store.uri={store}", f"sandbox.local.root_dir={tmp_path / 'sb'}"])
    summary = asyncio.run(run_experiment(cfg))
    rows = sorted(ResultStore.open(str(store)).read_trials(summary.run_id).to_pylist(), key=lambda r: r["started_at"])
    assert [r["task_id"] for r in rows] == ["t-long", "t-long", "t-mid", "t-mid", "t-short", "t-short"]
    # what they took becomes the prior of the next run in this store
    priors = store_priors(ResultStore.open(str(store)))
    assert set(priors) == {(rows[0]["benchmark"], n) for n in ("t-long", "t-mid", "t-short")}
    assert all(v >= 0 for v in priors.values())


@pytest.mark.integration
def test_the_order_bench_prints_both_orders() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "bench" / "order.py"), "--tasks", "20", "--seeds", "2",
                          "--slots", "4"], capture_output=True, text=True, timeout=120, check=True).stdout
    lines = out.splitlines()
    assert lines[0].startswith("40 trials, 20 tasks, 4 slots")
    assert [ln.split()[0] for ln in lines[2:]] == ["dataset", "longest_first", "longest_first"]
