"""The three Ray Serve routers on one model, one `farm run` each, in one table from the rows.

For each router in ``--routers`` this runs

    farm run model=<model> serve.enabled=true model.serving.num_replicas=<replicas>
        model.serving.router=<router> agent=leaf agent.max_steps=<steps>
        model.max_tokens_per_turn=<turn tokens> run.seeds=<seeds> run.max_in_flight=<n>
        run.executor=local benchmark.task_ids=[...] store.uri=<out>/<router> run.new=true <overrides>

(each router into its own store directory, one after the other, so that no two runs share a
machine), then reads every run's Parquet rows alone and prints one table: trials, model calls
(answered steps), prompt tokens, cached tokens, hit rate (cached / prompt tokens over the
attempts whose server reported both: farm/report/cost.py), TTFT p50 / p95 (``ttft_s`` of every
streamed step), wall per trial p50, run wall (first trial start to last trial end). ``--json``
prints the same rows as JSON (plus the TTFT-based hit-rate estimate of
farm/report/cache_estimate.py and each command's own wall time, model start included);
``--dry-run`` prints the farm commands and runs nothing; ``--table-only`` re-reads stores
already written. Anything after the options is passed to every `farm run` as overrides.

On the CPU (the docs/performance.md table "Routers on the real 0.5B": one-call trials, so only
prefix reuse across trials is measured):

    .venv/bin/python bench/routers.py --out /tmp/routers-0.5b

The hybrid model on a GPU machine (two GPUs: one replica each, tensor_parallel_size 1). Several
model calls per trial (30 steps, 4,096 tokens per turn), so reuse within a trial, where session
affinity should matter, is measured too; the whole bundled suite, three seeds:

    .venv/bin/python bench/routers.py --model frognano-4b --replicas 2 --tasks all --seeds 3 \\
        --steps 30 --turn-tokens 4096 --max-in-flight 32 --out /tmp/routers-frognano \\
        model.serving.engine_kwargs.max_num_seqs=64 model.serving.max_ongoing_requests=64 \\
        model.serving.target_ongoing_requests=32

``max_num_seqs`` is what the hybrid model's state pool must hold: `farm serve` and `farm run
serve.enabled=true` check it at start, before the weights load (farm/serve/state_pool.py
``check_serve_start``), and stop with one line naming both numbers and the fix when the pool is
smaller. FrogNano's preset keeps ``enable_prompt_tokens_details`` on, so its rows carry
``cached_tokens``; vLLM's prefix caching on this hybrid model runs in its "align" mode, whose
hits may be few (issue 28), which is what the table is for.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from farm.report.cache_estimate import step_features, ttft_hit_rate  # noqa: E402
from farm.report.cost import prefix_cache_hit_rate  # noqa: E402
from farm.report.data import RunData, load_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROUTERS = ("PowerOfTwoChoicesRouter", "PrefixCacheAffinityRouter", "ConsistentHashRouter")
# the four bundled tasks of the docs/performance.md table
TASKS = ("swe-paginate-off-by-one", "sec-static-path-traversal", "swe-utc-day-boundary",
         "term-git-recover-lost-commit")
COLUMNS = ("router", "trials", "model calls", "prompt tokens", "cached tokens", "hit rate", "TTFT p50", "TTFT p95",
           "wall per trial p50", "run wall")


def farm_command(args: argparse.Namespace, router: str, store: Path) -> list[str]:
    """The `farm run` command line of one router."""
    tasks = [] if args.tasks == "all" else [f"benchmark.task_ids=[{args.tasks}]"]
    return [sys.executable, "-m", "farm.cli", "run", f"model={args.model}", "serve.enabled=true",
            f"model.serving.num_replicas={args.replicas}", f"model.serving.router={router}", "agent=leaf",
            f"agent.max_steps={args.steps}", f"model.max_tokens_per_turn={args.turn_tokens}",
            f"run.seeds={args.seeds}", f"run.max_in_flight={args.max_in_flight}", "run.executor=local",
            *tasks, f"store.uri={store}", "run.new=true", *args.overrides]


def check(args: argparse.Namespace, routers: list[str], out: Path) -> None:
    """Every router's `farm run` config loads (a typo fails here, not after a model start).

    Raises:
        SystemExit: one line naming the router and the config error.
    """
    from farm.config import load_config
    from farm.errors import ConfigError
    from farm.serve.app import ROUTERS as KNOWN

    for router in routers:
        if router not in KNOWN and ":" not in router:
            raise SystemExit(f"unknown router {router!r}: choose from {sorted(KNOWN)} or give 'module:Class'")
        try:
            load_config(farm_command(args, router, out / router)[4:])
        except ConfigError as exc:
            raise SystemExit(f"{router}: {exc}") from None


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def aggregate(run: RunData) -> dict[str, Any]:
    """One router's row from its run's Parquet rows (every attempt, as the cost table counts)."""
    attempts = run.trials.to_pylist() if run.trials is not None else []
    steps = run.steps.to_pylist() if run.steps is not None else []
    latest: dict[str, dict[str, Any]] = {}
    for a in attempts:
        if a["trial_key"] not in latest or a["attempt"] > latest[a["trial_key"]]["attempt"]:
            latest[a["trial_key"]] = a
    by_attempt: dict[Any, list[dict[str, Any]]] = {}
    for s in steps:
        by_attempt.setdefault((s["trial_key"], s["attempt"]), []).append(s)
    features = [f for rows in by_attempt.values() for f in step_features(rows)]
    ttft = [float(s["ttft_s"]) for s in steps if s.get("ttft_s") is not None]
    walls = [float(t["wall_s"]) for t in latest.values() if t.get("wall_s") is not None]
    started = [t["started_at"] for t in attempts if t.get("started_at") is not None]
    finished = [t["finished_at"] for t in attempts if t.get("finished_at") is not None]

    def total(field: str) -> int | None:
        values = [a[field] for a in attempts if a.get(field) is not None]
        return int(sum(values)) if values else None

    return {
        "run_id": run.run_id,
        "trials": len(latest),
        "resolved": sum(1 for t in latest.values() if t["status"] == "resolved"),
        "model_calls": len(steps),
        "prompt_tokens": total("prompt_tokens"),
        "cached_tokens": total("cached_tokens"),
        "hit_rate": prefix_cache_hit_rate(attempts),
        "ttft_hit_rate_estimate": ttft_hit_rate(features),
        "ttft_steps": len(ttft),
        "ttft_p50_s": _percentile(ttft, 50),
        "ttft_p95_s": _percentile(ttft, 95),
        "wall_per_trial_p50_s": _percentile(walls, 50),
        "run_wall_s": max(finished) - min(started) if started and finished else math.nan,
    }


def _n(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


def _s(value: float, digits: int) -> str:
    return "–" if math.isnan(value) else f"{value:.{digits}f} s"


def render(rows: list[dict[str, Any]]) -> str:
    """The docs/performance.md table (markdown), one line per router."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        hit = "–" if math.isnan(r["hit_rate"]) else f"{100 * r['hit_rate']:.1f} %"
        cells = [r["router"], str(r["trials"]), str(r["model_calls"]), _n(r["prompt_tokens"]),
                 _n(r["cached_tokens"]), hit, _s(r["ttft_p50_s"], 2), _s(r["ttft_p95_s"], 2),
                 _s(r["wall_per_trial_p50_s"], 1), _s(r["run_wall_s"], 0)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def read_row(store: Path, router: str) -> dict[str, Any]:
    """``aggregate`` of the newest run in ``store``.

    Raises:
        SystemExit: the store holds no run.
    """
    from farm.store import ResultStore

    rs = ResultStore.open(str(store))
    runs = [(rs.read_run_meta(r) or {}, r) for r in rs.list_runs()]
    if not runs:
        raise SystemExit(f"{router}: no run in {store}")
    _, run_id = max(runs, key=lambda m: str(m[0].get("created_at", "")))
    return {"router": router, **aggregate(load_run(rs, run_id))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-cpu", help="model preset (conf/model/<name>.yaml)")
    ap.add_argument("--replicas", type=int, default=2, help="model.serving.num_replicas")
    ap.add_argument("--routers", default=",".join(ROUTERS), help="comma-separated model.serving.router values")
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated bundled task ids, or 'all'")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4, help="agent.max_steps")
    ap.add_argument("--turn-tokens", type=int, default=128, help="model.max_tokens_per_turn")
    ap.add_argument("--max-in-flight", type=int, default=4)
    ap.add_argument("--out", default="router-bench", help="one store directory per router under this")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--dry-run", action="store_true", help="print the farm commands, run nothing")
    ap.add_argument("--table-only", action="store_true", help="read the stores under --out, run nothing")
    ap.add_argument("overrides", nargs="*", default=[], help="more `farm run` overrides (key=value)")
    args = ap.parse_args(argv)
    routers = [r.strip() for r in args.routers.split(",") if r.strip()]
    out = Path(args.out).resolve()
    check(args, routers, out)
    if args.dry_run:
        for router in routers:
            print(" ".join(farm_command(args, router, out / router)))
        return 0

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    rows = []
    for router in routers:
        store, command_wall, rc = out / router, math.nan, None
        if not args.table_only:
            print(f"{router}: {' '.join(farm_command(args, router, store))}", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            rc = subprocess.run(farm_command(args, router, store), cwd=ROOT, env=env).returncode
            command_wall = time.monotonic() - t0
            if rc != 0:
                print(f"{router}: farm run exited {rc} (see its output above)", file=sys.stderr)
        rows.append({**read_row(store, router), "farm_exit_code": rc, "command_wall_s": command_wall})
    if args.json:  # NaN (nothing to measure) as null: strict JSON readers refuse NaN
        print(json.dumps([{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
                          for r in rows], indent=2))
    else:
        print(render(rows))
    return 0 if all(r["farm_exit_code"] in (0, None) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
