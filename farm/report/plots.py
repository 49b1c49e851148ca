"""Report figures as PNG bytes (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import io
import math
from collections import Counter

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from farm.report.claims import Ladder  # noqa: E402
from farm.report.data import CELL_STATUSES  # noqa: E402
from farm.report.stats import GroupStats  # noqa: E402
from farm.report.tables import ReportContent  # noqa: E402

STATUS_COLOURS = {
    "resolved": "#2e7d32",
    "unresolved": "#9e9e9e",
    "model_error": "#f9a825",
    "infra_error": "#c62828",
    "missing": "#6a1b9a",
}


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _label(run_id: str, arm: str, model: str, n_runs: int) -> str:
    parts = [model, arm] if arm not in ("", "base", "default") else [model]
    if n_runs > 1:
        parts.insert(0, run_id)
    return "\n".join(p for p in parts if p)


def benchmark_bars(c: ReportContent) -> bytes | None:
    """Avg@k with 95% CI per benchmark and (run, arm), against the claimed value."""
    if not c.stats:
        return None
    benches = sorted({s.benchmark for s in c.stats})
    n_runs = len({s.run_id for s in c.stats})
    fig, axes = plt.subplots(1, len(benches), figsize=(max(4.0, 3.6 * len(benches)), 3.8), squeeze=False)
    for ax, bench in zip(axes[0], benches):
        ss = [s for s in c.stats if s.benchmark == bench]
        x = np.arange(len(ss))
        vals = np.array([s.avg_at_k for s in ss])
        lo = np.array([s.ci_low for s in ss])
        hi = np.array([s.ci_high for s in ss])
        err = np.vstack([np.nan_to_num(vals - lo), np.nan_to_num(hi - vals)])
        ax.bar(x, vals, yerr=err, capsize=4, color="#4a78b5")
        for xi, s in zip(x, ss):
            claim = c.registry.claim_for(s.model, bench)
            if claim is not None:
                ax.hlines(claim.value, xi - 0.45, xi + 0.45, colors="#c62828", linewidth=2.5,
                          label=f"claim ({claim.metric})")
        ax.set_xticks(x, [_label(s.run_id, s.arm, s.model, n_runs) for s in ss], fontsize=7)
        ax.set_title(bench, fontsize=10)
        ax.set_ylim(0, 100)
        if ax is axes[0][0]:
            ax.set_ylabel("Avg@k resolve rate, %")
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            uniq = dict(zip(labels, handles))
            ax.legend(uniq.values(), uniq.keys(), fontsize=7, loc="upper right")
    fig.suptitle("Resolve rate (95% CI) against the published claim", fontsize=11)
    return _png(fig)


def ladder_positions(lad: Ladder, c: ReportContent) -> tuple[list[str], list[tuple[int, GroupStats]]]:
    """x labels and (x, measured group) of the runs on a ladder's benchmark.

    A run whose model is a ladder point's model (by alias) sits on that point; any other run
    gets its own position right of the ladder, labelled with its model.
    """
    labels = [p.label for p in lad.points]
    placed: list[tuple[int, GroupStats]] = []
    for s in c.stats:
        if c.registry.benchmark_key(s.benchmark) != lad.benchmark:
            continue
        mine = c.registry.model_key(s.model) or s.model
        pos = next(
            (i for i, p in enumerate(lad.points) if p.model and (c.registry.model_key(p.model) or p.model) == mine),
            None,
        )
        if pos is None:
            if s.model not in labels[len(lad.points):]:
                labels.append(s.model)
            pos = labels.index(s.model, len(lad.points))
        placed.append((pos, s))
    return labels, placed


def rl_ladder(c: ReportContent) -> list[tuple[str, bytes]]:
    """Each claimed ladder that concerns an evaluated model or benchmark, with our points."""
    out = []
    for lad in c.registry.ladders:
        labels, placed = ladder_positions(lad, c)
        if not placed and not any(c.registry.model_key(s.model) == lad.model for s in c.stats):
            continue
        fig, ax = plt.subplots(figsize=(7.5, 3.8))
        ax.plot(range(len(lad.points)), [p.value for p in lad.points], "o-", color="#c62828",
                label=f"claimed ({lad.metric}, {lad.name})")
        for pos, s in placed:
            err = None
            if not math.isnan(s.ci_low):
                err = [[max(s.avg_at_k - s.ci_low, 0)], [max(s.ci_high - s.avg_at_k, 0)]]
            ax.errorbar([pos], [s.avg_at_k], yerr=err, fmt="s", color="#1f4e9c", capsize=4,
                        label=f"measured {s.run_id}/{s.arm}")
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylabel(f"{lad.benchmark}, %")
        ax.set_title(f"{lad.model}: {lad.name} ladder ({lad.source})", fontsize=9)
        handles, lbls = ax.get_legend_handles_labels()
        uniq = dict(zip(lbls, handles))
        ax.legend(uniq.values(), uniq.keys(), fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
        out.append((f"ladder_{lad.model}_{lad.name}", _png(fig)))
    return out


def ablation_deltas(c: ReportContent) -> bytes | None:
    rows = [a for a in c.ablation if not a.is_baseline]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 0.6 * len(rows) + 1.5))
    y = np.arange(len(rows))
    d = np.array([r.delta_pts for r in rows])
    low = np.array([r.delta_ci_low for r in rows])
    high = np.array([r.delta_ci_high for r in rows])
    err = np.vstack([np.nan_to_num(d - low), np.nan_to_num(high - d)])
    colours = ["#2e7d32" if v >= 0 else "#c62828" for v in d]
    ax.barh(y, d, xerr=err, color=colours, capsize=4)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(y, [f"{r.benchmark}: {r.arm}" for r in rows], fontsize=8)
    ax.set_xlabel("paired difference to baseline, points (95% CI)")
    ax.set_title("Ablation deltas", fontsize=10)
    return _png(fig)


def _stacked(rows: list[tuple[str, Counter]], keys: list[str], colours: dict[str, str], title: str) -> bytes:
    """Horizontal stacked shares (percent of each row's total), so groups of different sizes compare."""
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.6))
    y = np.arange(len(rows))
    left = np.zeros(len(rows))
    cmap = plt.get_cmap("tab10")
    totals = np.array([max(sum(cnt.values()), 1) for _, cnt in rows], dtype=float)
    for i, key in enumerate(keys):
        vals = 100.0 * np.array([cnt.get(key, 0) for _, cnt in rows], dtype=float) / totals
        if not vals.any():
            continue
        ax.barh(y, vals, left=left, color=colours.get(key, cmap(i % 10)), label=key)
        left += vals
    ax.set_yticks(y, [label for label, _ in rows], fontsize=8)
    ax.set_xlabel("% of trials")
    ax.set_xlim(0, 100)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=min(len(keys), 5))
    return _png(fig)


def outcome_breakdown(c: ReportContent) -> bytes | None:
    if not c.stats:
        return None
    rows = [(f"{s.run_id}/{s.benchmark}/{s.arm}", Counter(s.counts)) for s in c.stats]
    return _stacked(rows, list(CELL_STATUSES), STATUS_COLOURS, "Outcome classes (all scheduled trials)")


def stop_reasons(c: ReportContent) -> bytes | None:
    rows = [(f"{g.run_id}/{g.benchmark}/{g.arm}", Counter(t.get("exit_reason") or "-" for t in g.trials))
            for g in c.groups]
    keys = sorted({k for _, cnt in rows for k in cnt})
    if not keys:
        return None
    return _stacked(rows, keys, {}, "Stop reasons (trials with a row)")


def all_figures(c: ReportContent) -> list[tuple[str, str, bytes]]:
    """(file stem, caption, PNG) of every figure that has data."""
    figs: list[tuple[str, str, bytes]] = []
    bars = benchmark_bars(c)
    if bars:
        figs.append(("benchmarks", "Resolve rate per benchmark with 95% CI; red bars are the published claims", bars))
    for stem, png in rl_ladder(c):
        figs.append((stem, "Claimed RL ladder with the checkpoints evaluated here", png))
    deltas = ablation_deltas(c)
    if deltas:
        figs.append(("ablation", "Per-arm paired difference to the baseline arm", deltas))
    outcomes = outcome_breakdown(c)
    if outcomes:
        title = "Outcome classes: infra errors and missing trials are failures, shown apart"
        figs.append(("outcomes", title, outcomes))
    stops = stop_reasons(c)
    if stops:
        figs.append(("stop_reasons", "Why the agent loop stopped", stops))
    return figs
