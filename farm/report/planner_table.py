"""The report's "Statistical planner" section: one row per claim and per ablation arm."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from farm.report.ablation import ArmRow
from farm.report.layout import Table, fmt, trace_columns
from farm.report.power import PowerOptions, PowerRow, seeds_cell
from farm.report.verdicts import Verdict


def power_fields(p: PowerRow | None) -> dict[str, Any]:
    """The planner's numbers as flat ``power_*`` columns (empty for a baseline or unmeasured row)."""
    if p is None:
        return {}
    return {f"power_{k}": v for k, v in asdict(p).items()}


def _row(kind: str, ident: dict[str, Any], target: str, measured: float, p: PowerRow) -> dict[str, Any]:
    return {**ident, "kind": kind, "target": target, "measured": measured, **power_fields(p)}


def planner_table(verdicts: list[Verdict], ablation: list[ArmRow], opts: PowerOptions) -> Table:
    rows = []
    for v in verdicts:
        if v.power is None:
            continue
        ident = {"run_id": v.run_id, "config_hash": v.config_hash, "benchmark": v.benchmark, "arm": v.arm,
                 "model": v.model}
        rows.append(_row("claim", ident, f"{v.claim.value:.1f} ({v.claim.metric})", v.measured, v.power))
    for a in ablation:
        if a.power is None:
            continue
        ident = {"run_id": a.run_id, "config_hash": a.config_hash, "benchmark": a.benchmark, "arm": a.arm,
                 "model": ""}
        rows.append(_row("ablation", ident, "Δ vs baseline", a.delta_pts, a.power))

    def seeds(r: dict[str, Any], which: str) -> str:
        return seeds_cell(r[f"power_seeds_for_{which}"], r[f"power_seeds_for_{which}_seeds_only"],
                          r["power_task_floor_pts"])

    def mdd(r: dict[str, Any]) -> str:
        return f"{fmt(r['power_mdd_pts'])} · {fmt(r['power_mdd_seeds_only_pts'])}"

    def gap(r: dict[str, Any]) -> str:
        g = r["power_observed_gap_pts"]
        return "–" if math.isnan(g) else f"{g:+.1f}"

    return Table(
        "power",
        "Statistical planner: minimum detectable difference and seeds needed",
        rows,
        [
            ("kind", lambda r: r["kind"]),
            ("benchmark", lambda r: r["benchmark"]),
            ("arm", lambda r: r["arm"]),
            ("target", lambda r: r["target"]),
            ("tasks × k", lambda r: f"{r['power_tasks']} × {r['power_seeds']}"),
            ("SD task · seed (pts)", lambda r: f"{fmt(r['power_sd_between_pts'])} · {fmt(r['power_sd_within_pts'])}"),
            ("ICC", lambda r: fmt(r["power_icc"], 2)),
            ("MDD pts (tasks+seeds · seeds only)", mdd),
            ("observed gap", gap),
            ("seeds for observed gap", lambda r: seeds(r, "observed")),
            (f"seeds for ±{opts.delta_pts:g} pts", lambda r: seeds(r, "delta")),
            *trace_columns(),
        ],
        note=f"Two-sided α={opts.alpha:g}, power {opts.power:g}. MDD = (z(1−α/2) + z(power)) · √Var with "
        "Var = σ²_task/T + σ²_seed/(T·k) when tasks count as a sample (the variance the bootstrap CI "
        "and the verdict use; equal to p(1−p)/(T·k) · (1 + (k−1)·ICC)), or σ²_seed/(T·k) for this fixed "
        "task set (seeds only). σ² are one-way ANOVA estimates from the measured task × seed matrix "
        "(ablations: of the paired arm − baseline differences); with one seed they are not separable. "
        "Seeds needed: smallest k with MDD ≤ the gap; none when the gap is under the task floor "
        "z·σ_task/√T, which no number of seeds removes. The claim is taken as exact (its own seed noise "
        "is not added). Details: docs/scale.md.",
    )
