"""Small synthetic runs built in memory from the store's own row types."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from farm.report.data import RunData
from farm.store import PLAN_SCHEMA
from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA, StepRow, TrialResult, to_table


def key(run_id: str, bench: str, task: str, seed: int, arm: str) -> str:
    return f"{run_id}:{bench}:{task}:{seed}:{arm}"


def plan_table(run_id: str, bench: str, tasks: list[str], seeds: list[int], arms: list[str], model: str) -> pa.Table:
    rows = [
        {"trial_key": key(run_id, bench, t, s, a), "benchmark": bench, "task_id": t, "seed": s, "arm": a,
         "model": model}
        for a in arms
        for t in tasks
        for s in seeds
    ]
    return pa.Table.from_pylist(rows, schema=PLAN_SCHEMA)


def trial(run_id: str, bench: str, task: str, seed: int, status: str, *, arm: str = "base",
          model: str = "m", attempt: int = 1, **extra: Any) -> TrialResult:
    return TrialResult(
        run_id=run_id, trial_key=key(run_id, bench, task, seed, arm), benchmark=bench, task_id=task,
        seed=seed, arm=arm, attempt=attempt, model=model, status=status,
        reward=1.0 if status == "resolved" else 0.0, config_hash="cfg-" + run_id, **extra,
    )


def meta(run_id: str, model: str = "m", arms: list[dict] | None = None, **config: Any) -> dict:
    cfg: dict[str, Any] = {"model": {"name": model}, "experiment": {"name": "test", "arms": arms or []}}
    cfg.update(config)
    return {"run_id": run_id, "config_hash": "cfg-" + run_id, "created_at": "2026-11-01T00:00:00Z",
            "farm_version": "0.1.0", "config": cfg}


def run_data(run_id: str, plan: pa.Table, trials: list[TrialResult], steps: list[StepRow] | None = None,
             **meta_kw: Any) -> RunData:
    return RunData(
        meta=meta(run_id, **meta_kw),
        plan=plan,
        trials=to_table(trials, TRIALS_SCHEMA),
        steps=to_table(steps or [], STEPS_SCHEMA),
    )


def matrix_run(run_id: str, bench: str, outcomes: dict[str, str], *, model: str = "m", arm: str = "base",
               plan_seeds: list[int] | None = None, **extra: Any) -> RunData:
    """``outcomes`` maps task_id -> one letter per seed: R resolved, U unresolved,
    M model_error, I infra_error, '.' missing."""
    letters = {"R": "resolved", "U": "unresolved", "M": "model_error", "I": "infra_error"}
    k = max(len(v) for v in outcomes.values())
    seeds = plan_seeds or list(range(k))
    trials = []
    for task, row in outcomes.items():
        for seed, ch in zip(seeds, row):
            if ch != ".":
                trials.append(trial(run_id, bench, task, seed, letters[ch], arm=arm, model=model, **extra))
    return run_data(run_id, plan_table(run_id, bench, list(outcomes), seeds, [arm], model), trials, model=model)


# --- an ablation run (base vs parallel tool calls) ---------------------------------------

ARMS = [
    {"name": "base", "overrides": []},
    {"name": "parallel", "overrides": ["model.parallel_tool_calls=true", "agent.tool_execution=concurrent"]},
]
BASE = {"t1": "RR", "t2": "RU", "t3": "UU", "t4": "UU"}
PAR = {"t1": "RR", "t2": "RR", "t3": "RU", "t4": "RR"}


def ablation_run() -> RunData:
    """Two arms over four tasks and two seeds, outcomes chosen so every ablation figure can be
    counted by hand (test_report_ablation.py does)."""
    trials, steps = [], []
    for arm, table in (("base", BASE), ("parallel", PAR)):
        for task, row in table.items():
            for seed, ch in enumerate(row):
                st = "resolved" if ch == "R" else "unresolved"
                if arm == "base":
                    trials.append(trial("r", "b", task, seed, st, arm=arm, steps=10, prompt_tokens=1000,
                                        completion_tokens=100, wall_s=60.0, tool_calling_turns=10,
                                        parallel_call_turns=1))
                else:
                    # no per-trial counts: the steps table must fill them in
                    trials.append(trial("r", "b", task, seed, st, arm=arm, steps=3, prompt_tokens=500,
                                        completion_tokens=50, wall_s=30.0))
                    for i, n in enumerate((2, 1, 0)):
                        steps.append(StepRow(run_id="r", trial_key=key("r", "b", task, seed, arm), attempt=1,
                                             step=i, n_tool_calls=n))
    plan = plan_table("r", "b", list(BASE), [0, 1], ["base", "parallel"], "m")
    return run_data("r", plan, trials, steps, arms=ARMS)
