"""What a result cost: tokens and seconds per trial and per resolved trial.

Totals sum every attempt, including attempts that ended in infra_error and were retried: that
work was paid for. "Per trial" divides by the number of trials that have a row, "per resolved"
by the number of resolved trials. The prefix-cache hit rate is cached ÷ prompt tokens over the
attempts whose server reported both (a server that does not report ``cached_tokens`` leaves it
unknown rather than 0 %, and does not dilute the others). Beside it stands an estimate of the
same rate from streamed steps' time to first token alone (farm/report/cache_estimate.py,
docs/cache-estimate.md), which does not trust the server's counter. GPU seconds are only known
for the whole run (when farm served the model itself, ``meta["gpu_seconds"]``); they are split
across groups in proportion to each group's LLM seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from farm.report.cache_estimate import step_features, ttft_hit_rate, ttft_p50
from farm.report.data import Group, RunData
from farm.report.layout import Column, Table, fmt, fmt_share, trace_columns

COST_FIELDS = ("prompt_tokens", "cached_tokens", "completion_tokens", "llm_s", "queue_s_total",
               "generation_s_total", "sandbox_cpu_s")


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
    ttft_hit_rate: float = math.nan  # the same share estimated from time to first token (NaN: cannot say)
    ttft_p50_s: float = math.nan  # median time to first token less server queue, streamed steps
    ttft_steps: int = 0  # streamed steps the estimate used


def prefix_cache_hit_rate(attempts: list[dict]) -> float:
    """Share of prompt tokens served from the prefix cache, over attempts that reported both."""
    both = [a for a in attempts if a.get("prompt_tokens") is not None and a.get("cached_tokens") is not None]
    prompt = sum(a["prompt_tokens"] for a in both)
    return sum(a["cached_tokens"] for a in both) / prompt if prompt else math.nan


def _steps_by_attempt(run: RunData) -> dict[Any, list[dict]]:
    """Step rows keyed by attempt_uid, and by (trial_key, attempt) for rows from before it existed."""
    out: dict[Any, list[dict]] = {}
    if run.steps is None or not run.steps.num_rows:
        return out
    for row in run.steps.to_pylist():
        out.setdefault(row.get("attempt_uid") or (row["trial_key"], row["attempt"]), []).append(row)
    return out


def _group_features(attempts: list[dict], steps: dict[Any, list[dict]]) -> list[tuple[float, float, float]]:
    features = []
    for a in attempts:
        rows = steps.get(a.get("attempt_uid") or (a["trial_key"], a["attempt"]), [])
        if not rows and a.get("attempt_uid"):  # steps written without the uid
            rows = steps.get((a["trial_key"], a["attempt"]), [])
        features += step_features(rows)
    return features


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
    steps = _steps_by_attempt(run)
    rows = []
    for g, tot in zip(groups, totals):
        features = _group_features(g.attempts, steps)
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
                ttft_hit_rate=ttft_hit_rate(features),
                ttft_p50_s=ttft_p50(features),
                ttft_steps=len(features),
            )
        )
    return rows


def cost_table(rows: list[CostRow]) -> Table:
    """Tokens and seconds per trial and per resolved trial."""
    cost = []
    for r in rows:
        row = {"run_id": r.run_id, "config_hash": r.config_hash, "benchmark": r.benchmark, "arm": r.arm,
               "model": r.model, "trials": r.trials, "attempts": r.attempts, "resolved": r.resolved}
        for f in (*COST_FIELDS, "gpu_s"):
            row[f"total_{f}"] = r.totals[f]
            row[f"{f}_per_trial"] = r.per_trial[f]
            row[f"{f}_per_resolved"] = r.per_resolved[f]
        row["prefix_cache_hit_rate"] = r.prefix_cache_hit_rate
        row["ttft_hit_rate_estimate"] = r.ttft_hit_rate
        row["ttft_p50_s"] = r.ttft_p50_s
        row["ttft_steps"] = r.ttft_steps
        cost.append(row)

    def per(f: str, digits: int = 0) -> Column:
        return (f"{f} /trial · /resolved",
                lambda r: f"{fmt(r[f + '_per_trial'], digits)} · {fmt(r[f + '_per_resolved'], digits)}")

    return Table(
        "cost",
        "Cost per trial and per resolved trial",
        cost,
        [
            ("benchmark", lambda r: r["benchmark"]),
            ("arm", lambda r: r["arm"]),
            ("trials (attempts)", lambda r: f"{r['trials']} ({r['attempts']})"),
            ("resolved", lambda r: str(r["resolved"])),
            per("prompt_tokens"),
            per("cached_tokens"),
            ("prefix-cache hits", lambda r: fmt_share(r["prefix_cache_hit_rate"])),
            ("hits est. from TTFT", lambda r: fmt_share(r["ttft_hit_rate_estimate"])),
            ("TTFT p50 s", lambda r: fmt(r["ttft_p50_s"], 2)),
            per("completion_tokens"),
            per("llm_s", 1),
            per("queue_s_total", 1),
            per("sandbox_cpu_s", 1),
            per("gpu_s", 1),
            *trace_columns(),
        ],
        note="Totals include every attempt (retried infra errors too). Prefix-cache hits: cached ÷ "
        "prompt tokens over the attempts whose server reported both (– when none did). Hits est. from TTFT: "
        "the same share estimated from streamed steps' time to first token alone (docs/cache-estimate.md; "
        "– with fewer than 8 streamed steps or timing too noisy to fit). TTFT p50: time to first token less "
        "the server's queue time. queue_s: the server's reported queue time (– when it reports none). GPU "
        "seconds are the run's serving GPU time, split by LLM seconds; – when the run did not serve the model.",
    )
