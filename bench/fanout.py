"""How many trials can one machine keep in flight, and what does each cost the orchestrator?

Runs N concurrent trials of a trivial task against a scripted endpoint with a fixed latency
per turn (default 2 s × 10 turns, each turn one Bash `true` in a real bubblewrap sandbox) and
reports: peak trials in flight, orchestrator RSS per in-flight trial (driver + Ray worker
actors; sandbox processes are not the orchestrator and are excluded), and the per-trial
overhead that is neither model latency, tool time, sandbox start nor grading.

    .venv/bin/python bench/fanout.py --trials 500 --executor ray
    .venv/bin/python bench/fanout.py --trials 100 --executor local --latency 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from farm.config import load_config  # noqa: E402
from farm.run.driver import run_experiment  # noqa: E402
from farm.store import ResultStore  # noqa: E402


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def worker_pids() -> list[int]:
    """Ray worker actors of this benchmark (their process title names the actor class)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"_TrialWorker" in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def make_task(root: Path) -> Path:
    d = root / "trivial"
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "task.toml").write_text(
        '[agent]\ntimeout_sec = 3600\nnetwork_mode = "no-network"\n'
        '[verifier]\ntimeout_sec = 60\nnetwork_mode = "no-network"\n'
    )
    (d / "instruction.md").write_text("Nothing to do.\n")
    (d / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (d / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return root


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--latency", type=float, default=2.0, help="seconds per model turn")
    ap.add_argument("--executor", choices=["ray", "local"], default="ray")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="farm-fanout-"))
    tasks = make_task(tmp / "tasks")
    turns = [{"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}], "delay_s": args.latency}
             for _ in range(args.turns - 1)] + [{"content": "done", "delay_s": args.latency}]
    script = tmp / "script.yaml"
    script.write_text(yaml.safe_dump(turns))
    cfg = load_config([
        f"benchmark.path={tasks}", "agent=scripted", f"agent.script={script}", f"run.seeds={args.trials}",
        f"run.max_in_flight={args.trials}", f"run.executor={args.executor}", f"run.workers={args.workers}",
        "run.max_attempts=1", f"store.uri={tmp / 'store'}", "sandbox.local.limits=false",
        f"sandbox.local.root_dir={tmp / 'sandboxes'}", "run.progress=false",
    ])

    state = {"in_flight": 0, "peak": 0, "peak_rss": 0.0, "samples": []}
    base_rss = rss_mib(os.getpid())

    def hook(event: str, outcome: object) -> None:
        if event == "start":
            state["in_flight"] += 1
            state["peak"] = max(state["peak"], state["in_flight"])
        elif event in ("done", "retry"):
            state["in_flight"] -= 1

    stop = threading.Event()
    base_workers: list[float] = []

    def sample() -> None:
        while not stop.is_set():
            wpids = worker_pids()
            rss = rss_mib(os.getpid()) + sum(rss_mib(p) for p in wpids)
            if not base_workers and wpids:
                base_workers.append(sum(rss_mib(p) for p in wpids))
            state["samples"].append((state["in_flight"], rss))
            stop.wait(0.5)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.monotonic()
    summary = asyncio.run(run_experiment(cfg, progress=hook))
    wall = time.monotonic() - t0
    stop.set()
    t.join()

    rows = ResultStore.open(str(tmp / "store")).read_trials(summary.run_id).to_pylist()
    parts = ("llm_s", "tool_s", "verify_s", "sandbox_start_s")
    overhead = [r["wall_s"] - sum(r[p] or 0 for p in parts) for r in rows if r["wall_s"] is not None]
    starts = [r["sandbox_start_s"] for r in rows if r["sandbox_start_s"] is not None]
    busy = [(n, rss) for n, rss in state["samples"] if n >= 0.9 * state["peak"]]
    peak_rss = max(rss for _, rss in busy) if busy else 0.0
    base = base_rss + (base_workers[0] if base_workers else 0.0)
    per_trial = (peak_rss - base) / state["peak"] if state["peak"] else float("nan")
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1

    def q(xs: list[float], p: float) -> float:
        return statistics.quantiles(xs, n=100)[int(p) - 1] if len(xs) >= 2 else (xs[0] if xs else float("nan"))

    print(f"\nfanout: {args.trials} trials × {args.turns} turns × {args.latency:g} s, executor={args.executor}, "
          f"workers={args.workers}, {os.cpu_count()} cores")
    print(f"{'metric':44} {'value':>14}")
    for name, value in [
        ("wall time (s)", f"{wall:.1f}"),
        ("ideal trial time (turns × latency, s)", f"{args.turns * args.latency:.1f}"),
        ("peak trials in flight", f"{state['peak']}"),
        ("orchestrator RSS at peak (MiB)", f"{peak_rss:.0f}"),
        ("orchestrator RSS before the run (MiB)", f"{base:.0f}"),
        ("orchestrator RSS per in-flight trial (MiB)", f"{per_trial:.2f}"),
        ("per-trial overhead p50 / p95 (s)", f"{q(overhead, 50):.2f} / {q(overhead, 95):.2f}"),
        ("sandbox start p50 / p95 (s)", f"{q(starts, 50):.2f} / {q(starts, 95):.2f}"),
        ("outcomes", " ".join(f"{k}={v}" for k, v in sorted(statuses.items()))),
    ]:
        print(f"{name:44} {value:>14}")


if __name__ == "__main__":
    main()
