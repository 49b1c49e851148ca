"""Compare measured Avg@k with published claims: reproduced, below, above, or incomplete."""

from __future__ import annotations

import math
from dataclasses import dataclass

from farm.report.claims import Claim, ClaimsRegistry
from farm.report.power import PowerOptions, PowerRow, power_row
from farm.report.stats import GroupStats


@dataclass(frozen=True)
class Verdict:
    run_id: str
    config_hash: str
    model: str
    benchmark: str
    arm: str
    claim: Claim
    measured: float
    ci_low: float
    ci_high: float
    k: int
    infra_or_missing_share: float
    verdict: str  # reproduced | below | above | incomplete | not_run
    delta_pts: float  # measured - claim (percentage points)
    note: str = ""
    power: PowerRow | None = None  # statistical planner: MDD and seeds needed (farm/report/power.py)

    @property
    def text(self) -> str:
        if self.verdict in ("below", "above"):
            return f"{self.verdict} by {abs(self.delta_pts):.1f} pts"
        if self.verdict == "not_run":
            return "not run"
        if self.verdict == "incomplete":
            return f"incomplete ({100 * self.infra_or_missing_share:.1f}% infra/missing)"
        return self.verdict


def judge(
    claim: Claim, stats: GroupStats, incomplete_threshold: float = 0.05, planner: PowerOptions | None = None
) -> Verdict:
    """Verdict of one claim against one measured group.

    "reproduced" when the claim lies inside the 95% CI of the all-scheduled Avg@k (bounds
    inclusive); "below"/"above" by the gap between our point estimate and the claim otherwise;
    "incomplete" takes precedence when more than ``incomplete_threshold`` of the scheduled
    trials ended in infra_error or never ran.
    """
    share = stats.infra_or_missing / stats.scheduled if stats.scheduled else 1.0
    delta = stats.avg_at_k - claim.value
    notes = []
    if claim.k is not None and claim.k != stats.k:
        notes.append(f"claim is {claim.metric}, measured avg@{stats.k}")
    if share > incomplete_threshold:
        verdict = "incomplete"
    elif math.isnan(stats.ci_low) or math.isnan(stats.ci_high):
        verdict = "incomplete"
    elif stats.ci_low <= claim.value <= stats.ci_high:
        verdict = "reproduced"
    elif claim.value > stats.ci_high:
        verdict = "below"
    else:
        verdict = "above"
    return Verdict(
        run_id=stats.run_id,
        config_hash=stats.config_hash,
        model=stats.model,
        benchmark=stats.benchmark,
        arm=stats.arm,
        claim=claim,
        measured=stats.avg_at_k,
        ci_low=stats.ci_low,
        ci_high=stats.ci_high,
        k=stats.k,
        infra_or_missing_share=share,
        verdict=verdict,
        delta_pts=delta,
        note="; ".join(notes),
        power=power_row(stats.variance, delta, planner or PowerOptions()) if stats.variance else None,
    )


def verdicts(
    all_stats: list[GroupStats], registry: ClaimsRegistry, incomplete_threshold: float = 0.05,
    planner: PowerOptions | None = None,
) -> list[Verdict]:
    """One verdict per measured group that has a matching claim (by model alias and benchmark)."""
    out = []
    measured: dict[tuple[str, str], GroupStats] = {}  # (run, model key) -> any group of it
    covered: set[tuple[str, str, str]] = set()
    for st in all_stats:
        claim = registry.claim_for(st.model, st.benchmark)
        key = registry.model_key(st.model)
        if key is not None:
            measured.setdefault((st.run_id, key), st)
        if claim is not None:
            out.append(judge(claim, st, incomplete_threshold, planner))
            covered.add((st.run_id, claim.model, claim.benchmark))
    # Claims of an evaluated model on benchmarks the run did not include are listed too, so
    # the reproduction table always shows the model's whole claim sheet.
    for (run_id, key), st in measured.items():
        for claim in registry.claims_for_model(key):
            if (run_id, claim.model, claim.benchmark) in covered:
                continue
            covered.add((run_id, claim.model, claim.benchmark))
            out.append(
                Verdict(
                    run_id=run_id, config_hash=st.config_hash, model=st.model,
                    benchmark=claim.benchmark, arm="-", claim=claim, measured=math.nan,
                    ci_low=math.nan, ci_high=math.nan, k=0, infra_or_missing_share=math.nan,
                    verdict="not_run", delta_pts=math.nan,
                )
            )
    return out
