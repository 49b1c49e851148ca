"""What a result cost: tokens and seconds per trial and per resolved trial.

Totals sum every attempt, including attempts that ended in infra_error and were retried: that
work was paid for. "Per trial" divides by the number of trials that have a row, "per resolved"
by the number of resolved trials. The prefix-cache hit rate is cached ÷ prompt tokens over the
attempts whose server reported both (a server that does not report ``cached_tokens`` leaves it
unknown rather than 0 %, and does not dilute the others). GPU seconds are only known for the whole run (when farm
served the model itself, ``meta["gpu_seconds"]``); they are split across groups in proportion
to each group's LLM seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from farm.report.data import Group, RunData

COST_FIELDS = ("prompt_tokens", "cached_tokens", "completion_tokens", "llm_s", "sandbox_cpu_s")


@dataclass
class CostRow:
    run_id: str
    config_hash: str
    benchmark: str
    arm: str
    model: str
    trials: int
    attempts: int
    resolved: int
    totals: dict[str, float]  # COST_FIELDS + gpu_s
    per_trial: dict[str, float]
    per_resolved: dict[str, float]
    prefix_cache_hit_rate: float  # cached ÷ prompt tokens, NaN when no attempt reported both


def prefix_cache_hit_rate(attempts: list[dict]) -> float:
    """Share of prompt tokens served from the prefix cache, over attempts that reported both."""
    both = [a for a in attempts if a.get("prompt_tokens") is not None and a.get("cached_tokens") is not None]
    prompt = sum(a["prompt_tokens"] for a in both)
    return sum(a["cached_tokens"] for a in both) / prompt if prompt else math.nan


def cost_rows(run: RunData, groups: list[Group]) -> list[CostRow]:
    totals = []
    for g in groups:
        # A field no attempt reported is unknown (NaN), not zero.
        tot = {
            f: float(sum(a.get(f) or 0 for a in g.attempts))
            if any(a.get(f) is not None for a in g.attempts) else math.nan
            for f in COST_FIELDS
        }
        totals.append(tot)
    gpu = run.meta.get("gpu_seconds")
    llm_all = sum(t["llm_s"] for t in totals if not math.isnan(t["llm_s"]))
    for tot in totals:
        if gpu is None:
            tot["gpu_s"] = math.nan
        elif llm_all > 0:
            tot["gpu_s"] = float(gpu) * np.nan_to_num(tot["llm_s"]) / llm_all
        else:
            tot["gpu_s"] = float(gpu) / len(totals)
    rows = []
    for g, tot in zip(groups, totals):
        n_trials = len(g.trials)
        n_resolved = sum(1 for t in g.trials if t["status"] == "resolved")
        rows.append(
            CostRow(
                run_id=g.run_id,
                config_hash=g.config_hash,
                benchmark=g.benchmark,
                arm=g.arm,
                model=g.model,
                trials=n_trials,
                attempts=len(g.attempts),
                resolved=n_resolved,
                totals=tot,
                per_trial={k: v / n_trials if n_trials else math.nan for k, v in tot.items()},
                per_resolved={k: v / n_resolved if n_resolved else math.nan for k, v in tot.items()},
                prefix_cache_hit_rate=prefix_cache_hit_rate(g.attempts),
            )
        )
    return rows
