"""Send a report to an experiment tracker: ``report.sinks=[wandb]`` / ``[mlflow]``.

What goes out is the report itself, never a second computation: ``tables.compute`` (the
numbers ``farm report`` prints and writes), the report's tables, ``plots.all_figures`` and the
run's stored config. One tracker run per report (named after the first farm run), holding:

- the config (W&B config / MLflow ``config.json`` artifact plus flattened params);
- per (run, benchmark, arm, model): Avg@k with its CI and standard error, the graded rate with
  its CI, pass@1..k, pass^1..k, flip rate and outcome counts, as summary metrics
  ``<benchmark>/<arm>/<model>/<name>`` (prefixed by the run id when several runs are reported);
- every report table (W&B tables / MLflow ``tables/<name>.csv``) and every plot (PNG).

Where they go is the libraries' own business and environment: ``WANDB_MODE`` (``offline``
writes a run directory under ``WANDB_DIR`` without a network), ``WANDB_PROJECT`` (default:
the experiment name), ``MLFLOW_TRACKING_URI`` (a ``file:`` URI is a local file store),
``MLFLOW_EXPERIMENT_NAME``. Both packages are optional (the ``[trackers]`` extra).
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.config import REPORT_SINKS
from farm.errors import ConfigError, FarmError
from farm.report.diff import dotted
from farm.report.layout import Table
from farm.report.tables import ReportContent

SINKS = REPORT_SINKS


class SinkError(FarmError):
    """A tracker refused the report (not installed, not reachable, bad settings)."""


def parse_sinks(value: Any) -> list[str]:
    """``report.sinks`` as a list: a list, or the text of one (``[wandb,mlflow]``, ``wandb``).

    Raises:
        ConfigError: an unknown sink name.
    """
    if value is None or value == "":
        return []
    items = value if isinstance(value, list | tuple) else str(value).strip().strip("[]").split(",")
    names = [str(i).strip().strip("'\"") for i in items if str(i).strip()]
    for name in names:
        if name not in SINKS:
            raise ConfigError(f"invalid value {name!r} in 'report.sinks': choose from {list(SINKS)}")
    return list(dict.fromkeys(names))


@dataclass
class Payload:
    """What a tracker receives, taken from the report's own content."""

    name: str
    project: str
    config: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    figures: list[tuple[str, str, bytes]] = field(default_factory=list)


_KEY = re.compile(r"[^A-Za-z0-9_.\-/ ]+")


def _key(*parts: Any) -> str:
    return "/".join(_KEY.sub("_", str(p)) for p in parts)


def payload(content: ReportContent, figures: list[tuple[str, str, bytes]]) -> Payload:
    runs = content.runs
    several = len(runs) > 1
    metrics: dict[str, float] = {}
    for s in content.stats:
        base = (s.run_id, s.benchmark, s.arm, s.model) if several else (s.benchmark, s.arm, s.model)
        values: dict[str, Any] = {
            "avg_at_k": s.avg_at_k, "ci_low": s.ci_low, "ci_high": s.ci_high, "stderr": s.stderr,
            "graded_rate": s.graded_rate, "graded_ci_low": s.graded_ci_low, "graded_ci_high": s.graded_ci_high,
            "flip_rate": s.flip_rate, "tasks": s.n_tasks, "k": s.k, "scheduled": s.scheduled,
            **{f"pass_at_{j}": v for j, v in s.pass_at.items()},
            **{f"pass_hat_{j}": v for j, v in s.pass_hat.items()},
            **{f"n_{status}": n for status, n in s.counts.items()},
        }
        for name, v in values.items():
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                metrics[_key(*base, name)] = float(v)
    exp = (runs[0].config.get("experiment") or {}).get("name") or "farm"
    config = runs[0].config if not several else {r.run_id: r.config for r in runs}
    return Payload(name="+".join(r.run_id for r in runs), project=str(exp), config=config, metrics=metrics,
                   tables=[t for t in content.tables if t.rows], figures=figures)


def _columns(table: Table) -> list[str]:
    cols: list[str] = []
    for row in table.rows:
        cols += [k for k in row if k not in cols]
    return cols


def _cell(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    return v if isinstance(v, int | float | str | bool) or v is None else str(v)


def to_wandb(p: Payload) -> str:
    """One W&B run; returns its directory."""
    try:
        import wandb
    except ImportError:
        raise SinkError("report.sinks: wandb is not installed (pip install 'farm[trackers]')") from None
    # a report is not a training process: its own CPU stats, console, code and pip list say nothing
    settings = wandb.Settings(console="off", x_disable_stats=True, x_disable_meta=True, x_save_requirements=False,
                              save_code=False, disable_git=True)
    run = wandb.init(project=os.environ.get("WANDB_PROJECT") or p.project, name=p.name, config=p.config,
                     job_type="farm-report", reinit="create_new", settings=settings)
    try:
        run.summary.update(p.metrics)
        logged: dict[str, Any] = {}
        for t in p.tables:
            cols = _columns(t)
            logged[f"tables/{t.name}"] = wandb.Table(columns=cols, data=[[_cell(r.get(c)) for c in cols]
                                                                         for r in t.rows])
        with tempfile.TemporaryDirectory() as tmp:
            for stem, caption, png in p.figures:
                path = Path(tmp) / f"{stem}.png"
                path.write_bytes(png)
                logged[f"plots/{stem}"] = wandb.Image(str(path), caption=caption)
            run.log(logged)
            directory = str(run.dir)
            run.finish()
    finally:
        wandb.teardown()  # stops the wandb-core service this process started
    return directory


def to_mlflow(p: Payload) -> str:
    """One MLflow run; returns its run id."""
    try:
        import mlflow
    except ImportError:
        raise SinkError("report.sinks: mlflow is not installed (pip install 'farm[trackers]')") from None
    from farm.report.render import write_csv

    mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME") or p.project)
    with mlflow.start_run(run_name=p.name) as run:
        # MLflow params are short strings; the whole config goes in as an artifact beside them
        params = {k: str(v)[:500] for k, v in dotted(p.config).items()}
        items = sorted(params.items())
        for i in range(0, len(items), 100):
            mlflow.log_params(dict(items[i:i + 100]))
        mlflow.log_dict(p.config, "config.json")
        mlflow.log_metrics(p.metrics)
        with tempfile.TemporaryDirectory() as tmp:
            for t in p.tables:
                path = Path(tmp) / "tables" / f"{t.name}.csv"
                path.parent.mkdir(exist_ok=True)
                write_csv(t, path)
            for stem, _, png in p.figures:
                path = Path(tmp) / "plots" / f"{stem}.png"
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(png)
            mlflow.log_artifacts(tmp)
        return str(run.info.run_id)


WRITERS: dict[str, Callable[[Payload], str]] = {"wandb": to_wandb, "mlflow": to_mlflow}


def send(content: ReportContent, figures: list[tuple[str, str, bytes]], sinks: list[str]) -> dict[str, str]:
    """Send the report to each sink; {sink: where it went}.

    Raises:
        SinkError: a sink is not installed or its library failed (the message names the sink).
    """
    p = payload(content, figures)
    out = {}
    for name in sinks:
        try:
            out[name] = WRITERS[name](p)
        except SinkError:
            raise
        except Exception as exc:  # the trackers raise their own types; name the sink and the cause
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise SinkError(f"report.sinks: {name} failed: {type(exc).__name__}: {first}") from None
    return out
