"""Compare two runs trial by trial: what changed between them, and what it did to the outcome.

Trials are paired by (benchmark, task, seed, arm), on their latest attempts. Each pair gets one
decision (docs/export.md):

- ``rerun``: something that shapes the rollout differs: any hashed config key outside ``grade``
  (agent, model, sandbox, serve, benchmark source, ...) of the two arms' resolved configs, or
  the rows' policy, answering model, image, image id, dataset revision, or the content hash of
  the agent's script, system prompt or tool list (a file changed under the same path). Its
  agent would have to run again to reproduce the other run's trial.
- ``regrade``: only ``grade.*`` differs: the stored patch could be re-graded (``farm regrade``).
- ``same``: neither differs.

Not counted as a change: keys that choose *which* trials run rather than *how*
(``benchmark.task_ids / limit / sample / sample_seed``, ``run.seeds``, ``experiment.*`` once the
arm's overrides are applied), where the endpoint listens (``model.base_url``, ``api_key_env``;
the row's answering model says who answered) and every key ``config_hash`` leaves out
(execution settings). A different farm version is reported beside the decision, not folded in.

The paired statistics are the report's own (farm/report/ablation.py): the mean paired
difference B - A of "resolved" with its two-stage bootstrap CI, and McNemar's exact test on
per-task majority outcomes, per (benchmark, arm), on the task × seed cells both runs hold.
As in Avg@k, an infra_error counts as not resolved; ``infra`` says how many pairs hold one.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from farm.report.ablation import mcnemar, paired_difference
from farm.report.data import RunData, latest_attempts
from farm.report.layout import Table, fmt, fmt_ci
from farm.report.limits import outcome_label
from farm.report.stats import BootstrapOptions, avg_at_k

DECISIONS = ("same", "regrade", "rerun")
# Keys that select trials or say where the endpoint listens; they do not change how a trial runs.
SELECTION_KEYS = ("benchmark.task_ids", "benchmark.limit", "benchmark.sample", "benchmark.sample_seed",
                  "run.seeds", "experiment", "model.base_url", "model.api_key_env")
GRADER_SECTION = "grade"
# Row columns that say what actually ran; compared when both rows have a value. The content
# hashes catch a file changed under the same path (the config holds only the path): the
# scripted policy's agent.script (or the predictions file), the system prompt and the tool list the model was shown.
ROW_PROVENANCE = ("policy", "model", "image", "image_id", "dataset_revision", "agent_script_sha256",
                  "system_prompt_sha256", "tools_sha256")

Key = tuple[str, str, int, str]  # benchmark, task_id, seed, arm
FLIPS_SHOWN = 20  # pairs whose status differs, listed in the terminal form


@dataclass
class PairDecision:
    benchmark: str
    task_id: str
    seed: int
    arm: str
    decision: str  # one of DECISIONS
    changed: list[str]  # the config keys / row columns behind the decision
    status_a: str
    status_b: str
    farm_version_a: str | None = None
    farm_version_b: str | None = None
    # the status with what the row says of a lost sandbox (farm/report/limits.py): a pair that went
    # from infra_error to unresolved because the loss was attributed to the model's limit says so
    outcome_a: str = ""
    outcome_b: str = ""


@dataclass
class ArmDiff:
    benchmark: str
    arm: str
    pairs: int
    decisions: dict[str, int]
    only_a: int
    only_b: int
    flipped: int  # pairs whose status differs
    infra: int  # pairs with an infra_error on either side
    n_tasks: int  # tasks whose every common seed both runs hold (the paired cells)
    k: int
    rate_a: float
    rate_b: float
    delta_pts: float  # B - A, points
    delta_ci_low: float
    delta_ci_high: float
    mcnemar_b: int  # tasks resolved (majority of seeds) in A only
    mcnemar_c: int  # ... in B only
    mcnemar_p: float


@dataclass
class RunDiff:
    run_a: str
    run_b: str
    config_hash_a: str
    config_hash_b: str
    pairs: list[PairDecision]
    arms: list[ArmDiff]
    bootstrap: BootstrapOptions
    notes: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        c = Counter(p.decision for p in self.pairs)
        return {d: c.get(d, 0) for d in DECISIONS}

    def to_json(self) -> dict[str, Any]:
        return _finite({"run_a": self.run_a, "run_b": self.run_b, "config_hash_a": self.config_hash_a,
                        "config_hash_b": self.config_hash_b, "counts": self.counts,
                        "bootstrap": asdict(self.bootstrap), "notes": self.notes,
                        "arms": [asdict(a) for a in self.arms], "pairs": [asdict(p) for p in self.pairs]})


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


# -- what each arm ran with ------------------------------------------------------------------
def dotted(data: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{"a.b.c": value}`` (what a diff compares and a tracker logs)."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(dotted(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data}


def _excluded(key: str, backend: str | None) -> bool:
    from farm.config import CHOICES, NOT_HASHED

    def under(prefix: str) -> bool:
        return key == prefix or key.startswith(prefix + ".")

    if any(under(p) for p in (*NOT_HASHED, *SELECTION_KEYS)):
        return True
    # only the chosen backend's section shapes the sandboxes (as in config_hash)
    return any(under(f"sandbox.{b}") for b in CHOICES["sandbox.backend"] if b != backend)


def arm_settings(run: RunData) -> tuple[dict[str, dict[str, Any]], str | None]:
    """{arm: flattened resolved config, without the keys that do not change a trial}, or ({}, why)
    when the stored config does not load in this farm version."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from farm.config import FarmConfig, to_dict
    from farm.config.arms import arms_of
    from farm.errors import FarmError

    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(FarmConfig), run.config))
        arms = arms_of(cfg)  # type: ignore[arg-type]
    except (OmegaConfBaseException, FarmError) as exc:
        return {}, f"the stored config of run {run.run_id} does not load in this farm version ({exc})"
    out = {}
    for name, acfg in arms:
        flat = dotted(to_dict(acfg))
        backend = flat.get("sandbox.backend")
        out[name] = {k: v for k, v in flat.items() if not _excluded(k, backend)}
    return out, None


def _changed(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def decide(row_a: dict[str, Any], row_b: dict[str, Any], cfg_a: dict[str, Any] | None,
           cfg_b: dict[str, Any] | None) -> tuple[str, list[str]]:
    """(decision, what changed) for one pair of trial rows and their arms' settings; without
    settings (a stored config that no longer loads), the rows' config hashes decide alone."""
    row_changes = [c for c in ROW_PROVENANCE
                   if row_a.get(c) is not None and row_b.get(c) is not None and row_a[c] != row_b[c]]
    if cfg_a is None or cfg_b is None:
        if row_a.get("config_hash") == row_b.get("config_hash") and not row_changes:
            return "same", []
        return "rerun", row_changes or ["config_hash"]
    keys = _changed(cfg_a, cfg_b)
    agent = [k for k in keys if not k.startswith(GRADER_SECTION + ".")]
    if agent or row_changes:
        return "rerun", agent + [f"row:{c}" for c in row_changes]
    if keys:
        return "regrade", keys
    return "same", []


# -- the diff --------------------------------------------------------------------------------
def _rows(run: RunData) -> dict[Key, dict[str, Any]]:
    latest = latest_attempts(run.trials.to_pylist())
    return {(t["benchmark"], t["task_id"], int(t["seed"]), t["arm"]): t for t in latest}


def _paired_matrices(keys: set[Key], a: dict[Key, dict], b: dict[Key, dict]) -> tuple[np.ndarray, np.ndarray]:
    """(T, S) "resolved" matrices of one (benchmark, arm) over the tasks that both runs hold for
    every common seed."""
    seeds = sorted({k[2] for k in keys})
    have = {(k[1], k[2]) for k in keys}
    tasks = sorted(t for t in {k[1] for k in keys} if all((t, s) in have for s in seeds))
    bench, _, _, arm = next(iter(keys))
    ok_a = np.array([[a[(bench, t, s, arm)]["status"] == "resolved" for s in seeds] for t in tasks], dtype=bool)
    ok_b = np.array([[b[(bench, t, s, arm)]["status"] == "resolved" for s in seeds] for t in tasks], dtype=bool)
    return ok_a.reshape(len(tasks), len(seeds)), ok_b.reshape(len(tasks), len(seeds))


def diff_runs(run_a: RunData, run_b: RunData, opts: BootstrapOptions | None = None) -> RunDiff:
    opts = opts or BootstrapOptions()
    rows_a, rows_b = _rows(run_a), _rows(run_b)
    settings_a, why_a = arm_settings(run_a)
    # resolving arms costs seconds (OmegaConf); a run compared with itself or a rerun of one config resolves once
    settings_b, why_b = (settings_a, why_a) if run_b.config == run_a.config else arm_settings(run_b)
    notes = [w for w in (why_a, why_b) if w]
    if notes:
        notes.append("decisions fall back to the rows' config hashes")
    pairs = []
    for key in sorted(set(rows_a) & set(rows_b)):
        ra, rb = rows_a[key], rows_b[key]
        decision, changed = decide(ra, rb, settings_a.get(key[3]) if not why_a else None,
                                   settings_b.get(key[3]) if not why_b else None)
        pairs.append(PairDecision(*key, decision=decision, changed=changed, status_a=ra["status"],
                                  status_b=rb["status"], farm_version_a=ra.get("farm_version"),
                                  farm_version_b=rb.get("farm_version"), outcome_a=outcome_label(ra),
                                  outcome_b=outcome_label(rb)))
    versions = {(p.farm_version_a, p.farm_version_b) for p in pairs if p.farm_version_a != p.farm_version_b}
    for va, vb in sorted(versions, key=str):
        notes.append(f"farm version differs ({va} -> {vb}): the harness code may differ beyond the config")

    only_a = Counter((k[0], k[3]) for k in rows_a if k not in rows_b)
    only_b = Counter((k[0], k[3]) for k in rows_b if k not in rows_a)
    by_group: dict[tuple[str, str], list[PairDecision]] = {}
    for pd in pairs:
        by_group.setdefault((pd.benchmark, pd.arm), []).append(pd)
    arms = []
    for bench, arm in sorted({(k[0], k[3]) for k in set(rows_a) | set(rows_b)}):
        mine = by_group.get((bench, arm), [])
        common = {(x.benchmark, x.task_id, x.seed, x.arm) for x in mine}
        if common:
            ok_a, ok_b = _paired_matrices(common, rows_a, rows_b)
        else:
            ok_a = ok_b = np.zeros((0, 0), dtype=bool)
        delta, lo, hi = paired_difference(ok_a, ok_b, opts)
        b, c, p = mcnemar(ok_a, ok_b) if ok_a.size else (0, 0, math.nan)
        counts = Counter(x.decision for x in mine)
        arms.append(ArmDiff(
            benchmark=bench, arm=arm, pairs=len(mine), decisions={d: counts.get(d, 0) for d in DECISIONS},
            only_a=only_a.get((bench, arm), 0), only_b=only_b.get((bench, arm), 0),
            flipped=sum(1 for x in mine if x.status_a != x.status_b),
            infra=sum(1 for x in mine if "infra_error" in (x.status_a, x.status_b)),
            n_tasks=int(ok_a.shape[0]), k=int(ok_a.shape[1]) if ok_a.ndim == 2 else 0,
            rate_a=avg_at_k(ok_a), rate_b=avg_at_k(ok_b), delta_pts=delta, delta_ci_low=lo, delta_ci_high=hi,
            mcnemar_b=b, mcnemar_c=c, mcnemar_p=p,
        ))
    return RunDiff(run_a.run_id, run_b.run_id, run_a.config_hash, run_b.config_hash, pairs, arms, opts, notes)


def changed_keys(diff: RunDiff, decision: str) -> Counter[str]:
    """How many pairs of ``decision`` each changed key or row column stands behind."""
    return Counter(k for p in diff.pairs if p.decision == decision for k in p.changed)


def report_table(diff: RunDiff) -> Table:
    """The diff as a report table (Markdown / HTML / CSV of the report)."""
    level = int(round(diff.bootstrap.level * 100))
    # run_id / config_hash (B's) as on every report row, so each CSV row names where it came from
    rows = [{"run_id": diff.run_b, "config_hash": diff.config_hash_b, "run_a": diff.run_a,
             "config_hash_a": diff.config_hash_a, **{k: v for k, v in asdict(a).items() if k != "decisions"},
             **{f"n_{d}": a.decisions[d] for d in DECISIONS}} for a in diff.arms]
    return Table(
        "run_diff", f"Run diff: {diff.run_b} against {diff.run_a}", rows,
        [
            ("benchmark", lambda r: r["benchmark"]),
            ("arm", lambda r: r["arm"]),
            ("pairs", lambda r: str(r["pairs"])),
            ("same", lambda r: str(r["n_same"])),
            ("regrade", lambda r: str(r["n_regrade"])),
            ("rerun", lambda r: str(r["n_rerun"])),
            ("only A / B", lambda r: f"{r['only_a']} / {r['only_b']}"),
            ("flipped", lambda r: str(r["flipped"])),
            ("A %", lambda r: fmt(r["rate_a"])),
            ("B %", lambda r: fmt(r["rate_b"])),
            ("Δ pts (B−A)", lambda r: fmt(r["delta_pts"])),
            (f"{level}% CI", lambda r: fmt_ci(r["delta_ci_low"], r["delta_ci_high"])),
            ("McNemar b/c", lambda r: f"{r['mcnemar_b']}/{r['mcnemar_c']}"),
            ("p", lambda r: fmt(r["mcnemar_p"], 3)),
        ],
        note=(f"pairs: trials both runs hold, by (benchmark, task, seed, arm); Δ: paired difference of resolved, "
              f"two-stage bootstrap (B={diff.bootstrap.samples}, seed={diff.bootstrap.seed}) on the task × seed "
              "cells both hold; McNemar on per-task majority outcomes; rerun / regrade / same: docs/export.md"),
    )


def print_diff(diff: RunDiff, console: Any) -> None:
    """The terminal form: the decision counts, what changed, and the table of ``report_table``."""
    from rich import box
    from rich.table import Table as RichTable

    counts = diff.counts
    console.print(f"run [bold]{diff.run_b}[/] against [bold]{diff.run_a}[/]: {len(diff.pairs)} trials in both; "
                  + ", ".join(f"{d} {counts[d]}" for d in DECISIONS), highlight=False, soft_wrap=True)
    for decision in ("rerun", "regrade"):
        keys = changed_keys(diff, decision)
        if keys:
            shown = ", ".join(f"{k} ({n})" for k, n in sorted(keys.items(), key=lambda kv: (-kv[1], kv[0]))[:12])
            console.print(f"  {decision}: {shown}", highlight=False, soft_wrap=True)
    for note in diff.notes:
        console.print(f"  note: {note}", highlight=False, soft_wrap=True)
    flipped = [p for p in diff.pairs if p.status_a != p.status_b]
    for p in flipped[:FLIPS_SHOWN]:
        console.print(f"  flipped ({p.decision}): {p.benchmark} {p.task_id} seed {p.seed} arm {p.arm}: "
                      f"{p.outcome_a or p.status_a} -> {p.outcome_b or p.status_b}", highlight=False, soft_wrap=True)
    if len(flipped) > FLIPS_SHOWN:
        console.print(f"  ... and {len(flipped) - FLIPS_SHOWN} more flipped pairs (--json lists every pair)")
    table = report_table(diff)
    rich = RichTable(box=box.SIMPLE_HEAD, show_edge=False)
    for header, _ in table.display:
        rich.add_column(header)
    for row in table.rows:
        rich.add_row(*(f(row) for _, f in table.display))
    console.print(rich)
    console.print(table.note, style="dim", highlight=False, soft_wrap=True)
