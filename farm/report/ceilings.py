"""Claims read against what is achievable: each verdict again, with the score over the ceiling.

A run's Avg@k counts every task of the pin, including tasks whose own oracle fails (an invalid
gold patch, a verifier that times out, an environment not built here). The plain verdict reads
the claim against that score, i.e. against 100 %. The ceiling verdict divides the measured
score and its CI by the share of the run's tasks whose oracle passes (farm/tasks/ceiling.py)
and reads the claim against that: what the model scored on what could be scored, taking the
claim as measured where every task was achievable (the vendor's own images). Tasks no ceiling
entry covers are assumed achievable for the verdict, as the 100 % reading assumes of all, and
counted as unknown in the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from farm.report.data import Group
from farm.report.layout import Table, fmt, trace_columns
from farm.report.stats import GroupStats
from farm.report.verdicts import Verdict, judge
from farm.tasks.ceiling import Ceiling, CeilingFile, load_ceiling

Key = tuple[str, str, str, str]  # run_id, benchmark, arm, model


@dataclass(frozen=True)
class CeilingVerdict:
    verdict: Verdict  # the plain one, against 100 %
    ceiling: Ceiling | None  # None: the benchmark has no ceiling file
    file: CeilingFile | None
    against_ceiling: Verdict | None  # None without a ceiling or with a ceiling of 0

    @property
    def share(self) -> float:
        """The ceiling the verdict divides by (0..1): unknown tasks counted achievable."""
        return self.ceiling.high if self.ceiling else math.nan


def _key(x: Group | GroupStats | Verdict) -> Key:
    return (x.run_id, x.benchmark, x.arm, x.model)


def ceiling_verdicts(groups: list[Group], stats: list[GroupStats], verdicts: list[Verdict],
                     incomplete_threshold: float, directory: Path | str | None = None) -> list[CeilingVerdict]:
    """One row per measured verdict (claims on benchmarks the run did not cover have none)."""
    by_group = {_key(g): g for g in groups}
    by_stats = {_key(s): s for s in stats}
    files: dict[str, CeilingFile | None] = {}
    out = []
    for v in verdicts:
        key = _key(v)
        if v.verdict == "not_run" or key not in by_stats:
            continue
        if v.benchmark not in files:
            files[v.benchmark] = load_ceiling(v.benchmark, directory)
        cf = files[v.benchmark]
        ceiling = cf.ceiling(by_group[key].tasks) if cf else None
        scaled = None
        if ceiling is not None and ceiling.high > 0:
            s, share = by_stats[key], ceiling.high
            # the planner's variance is for the unscaled score: left out rather than misread
            scaled = judge(v.claim, replace(s, avg_at_k=s.avg_at_k / share, ci_low=s.ci_low / share,
                                            ci_high=s.ci_high / share, variance=None), incomplete_threshold)
        out.append(CeilingVerdict(verdict=v, ceiling=ceiling, file=cf, against_ceiling=scaled))
    return out


def ceiling_cell(c: Ceiling | None) -> str:
    if c is None:
        return "no ceiling file"
    text = f"{fmt(100 * c.low)} ({c.achievable}/{c.tasks})"
    if c.unknown:
        text += f", {c.unknown} unknown: up to {fmt(100 * c.high)}"
    return text


def ceiling_fields(cv: CeilingVerdict | None) -> dict[str, object]:
    """The verdicts table's extra columns (raw values for the CSV)."""
    c = cv.ceiling if cv else None
    scaled = cv.against_ceiling if cv else None
    return {
        "ceiling_pct": 100 * c.low if c else math.nan,
        "ceiling_high_pct": 100 * c.high if c else math.nan,
        "ceiling_achievable": c.achievable if c else None,
        "ceiling_tasks": c.tasks if c else None,
        "ceiling_unknown": c.unknown if c else None,
        "ceiling_cell": ceiling_cell(c) if cv else "–",
        "measured_over_ceiling": scaled.measured if scaled else math.nan,
        "verdict_vs_ceiling": scaled.verdict if scaled else "",
        "verdict_vs_ceiling_text": scaled.text if scaled else "–",
    }


def ceiling_columns() -> list[tuple[str, object]]:
    def over(r: dict, value: str) -> str:
        if not isinstance(r.get("ceiling_tasks"), int):
            return "–"
        return f"{fmt(r[value])} / {fmt(r['ceiling_high_pct'])}"

    return [
        ("ceiling %", lambda r: r["ceiling_cell"]),
        ("measured / ceiling", lambda r: over(r, "measured")),
        ("claim / ceiling", lambda r: over(r, "claim")),
        ("verdict vs ceiling", lambda r: r["verdict_vs_ceiling_text"]),
    ]


CEILING_NOTE = (
    " Verdict (vs 100 %): the claim against Avg@k over every task. Verdict vs ceiling: the claim "
    "against Avg@k and its CI divided by the ceiling, the share of the run's tasks whose own "
    "oracle passes (tasks no ceiling entry covers counted as achievable); see the Ceilings table."
)


def ceilings_table(rows: list[CeilingVerdict]) -> list[Table]:
    """Per benchmark a run covered: its ceiling over the run's tasks, by status, and where from."""
    seen: dict[tuple[str, str], dict] = {}
    for cv in rows:
        v, c, cf = cv.verdict, cv.ceiling, cv.file
        if (v.run_id, v.benchmark) in seen:
            continue
        prov = "; ".join(_provenance_text(cf, pid) for pid in c.provenance) if c and cf else ""
        seen[(v.run_id, v.benchmark)] = {
            "run_id": v.run_id, "config_hash": v.config_hash, "benchmark": v.benchmark,
            "pin_revision": cf.pin["revision"] if cf else "",
            "tasks": c.tasks if c else None, "achievable": c.achievable if c else None,
            "unknown": c.unknown if c else None, "ceiling_cell": ceiling_cell(c),
            "by_status": ", ".join(f"{k} {n}" for k, n in sorted(c.by_status.items())) if c else "",
            "flaky_counts_as": cf.flaky_counts_as if cf else "", "provenance": prov,
            "file": str(cf.path) if cf and cf.path else "",
        }
    if not seen:
        return []
    return [Table(
        "ceilings", "Ceilings: the share of the run's tasks whose own oracle passes", list(seen.values()),
        [
            ("benchmark", lambda r: r["benchmark"]),
            ("pin", lambda r: r["pin_revision"][:12] or "–"),
            ("ceiling %", lambda r: r["ceiling_cell"]),
            ("oracle status", lambda r: r["by_status"] or "–"),
            ("flaky counts as", lambda r: r["flaky_counts_as"] or "–"),
            ("from", lambda r: r["provenance"] or "–"),
            *trace_columns(),
        ],
        note="Per task status from farm/tasks/ceilings/<benchmark>.json (docs/benchmarks.md, Ceilings): "
             "pass, flaky (over N runs), invalid_gold, timeout, harness_bug, not_built; unknown = in no entry.",
    )]


def _provenance_text(cf: CeilingFile, pid: str) -> str:
    p = cf.provenance[pid]
    # the commit belongs to the file read (repo + path), which may be a copy of the URL's file
    read = ":".join(x for x in (p.get("repo"), p.get("path")) if x)
    where = f"{read} @ {p['commit'][:12]}" if read and p.get("commit") else read or p.get("url", "")
    return f"{pid} ({p['kind']}, {p['date']}{', ' + where if where else ''})"
