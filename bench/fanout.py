"""How many trials can one machine keep in flight, and what does each cost the orchestrator?

Runs N concurrent trials of a trivial task against the scripted endpoint with a fixed latency
per turn (default 2 s × 10 turns, each turn one Bash `true` in a real bubblewrap sandbox) and
reports: peak trials in flight, orchestrator memory per in-flight trial, completed trials/s,
the scheduling overhead per attempt (driver -> Ray worker -> driver, outside the trial), the
in-trial overhead that is neither model latency, tool time, sandbox start nor grading,
Parquet rows/s and store objects per 100 trials.

``--sandbox none`` uses the benchmark-only backend that isolates and runs nothing
(farm/sandbox/none/sandbox.py; this script sets FARM_BENCH_NULL_SANDBOX=1, which it requires) and a
zero-latency endpoint, so what is measured is the driver, the Ray workers and the store alone.
``--store s3`` writes to a moto S3 server on 127.0.0.1 instead of a local directory.

Memory is counted two ways: RSS of the driver + the Ray worker actors (the orchestrator;
sandbox processes excluded), and PSS of every process the run started (Ray's GCS, raylet and
other daemons too; the moto server excluded), each as the increase from the moment the first
trial starts (Ray up) to the busiest samples, divided by the peak in flight.

    .venv/bin/python bench/fanout.py --trials 500 --executor ray
    .venv/bin/python bench/fanout.py --trials 100 --executor local --latency 1
    .venv/bin/python bench/fanout.py --sandbox none --trials 10000 --json
    .venv/bin/python bench/fanout.py --sandbox none --trials 2000 --store s3 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from farm.config import load_config  # noqa: E402
from farm.run import driver  # noqa: E402
from farm.sandbox.none.sandbox import GUARD_ENV  # noqa: E402
from farm.store import ResultStore  # noqa: E402


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def pss_mib(pid: int) -> float:
    """Proportional set size: pages shared between processes (Ray's object store, libraries)
    are split among them, so a sum over processes counts each page once."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
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


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (Ray's GCS, raylet, workers; the moto server): what the run started."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


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


def start_moto(tmp: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """A moto S3 server on 127.0.0.1 (real HTTP and S3 wire protocol), as tests/conftest.py starts it."""
    import boto3

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update({"AWS_ACCESS_KEY_ID": "farmbench", "AWS_SECRET_ACCESS_KEY": "farmbench",
                       "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"})
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.time() > deadline:
                proc.kill()
                raise SystemExit("moto S3 server did not start") from None
            time.sleep(0.1)
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="farm-bench")
    return proc, endpoint, "s3://farm-bench/results"


def count_objects(uri: str, endpoint: str | None, run_id: str) -> int:
    """Objects (files) the run wrote to the store: Parquet, artifacts, metadata, heartbeats."""
    if not uri.startswith("s3://"):
        return sum(1 for p in Path(uri).rglob("*") if p.is_file() and run_id in str(p))
    import boto3

    bucket, _, prefix = uri[5:].partition("/")
    pages = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").get_paginator("list_objects_v2")
    return sum(1 for page in pages.paginate(Bucket=bucket, Prefix=prefix) for obj in page.get("Contents", [])
               if run_id in obj["Key"])


def q(xs: list[float], p: float) -> float:
    return statistics.quantiles(xs, n=100)[int(p) - 1] if len(xs) >= 2 else (xs[0] if xs else float("nan"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--latency", type=float, default=None,
                    help="seconds per model turn (default 2 with --sandbox local, 0 with --sandbox none)")
    ap.add_argument("--executor", choices=["ray", "local"], default="ray")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-in-flight", type=int, default=None, help="run.max_in_flight (default: --trials)")
    ap.add_argument("--sandbox", choices=["local", "none"], default="local",
                    help="none: the benchmark-only backend that runs and isolates nothing "
                         "(farm/sandbox/none/sandbox.py)")
    ap.add_argument("--store", choices=["local", "s3"], default="local", help="s3: a moto S3 server on 127.0.0.1")
    ap.add_argument("--json", action="store_true", help="also print the numbers as one JSON line")
    args = ap.parse_args()
    latency = args.latency if args.latency is not None else (2.0 if args.sandbox == "local" else 0.0)
    max_in_flight = args.max_in_flight or args.trials

    tmp = Path(tempfile.mkdtemp(prefix="farm-fanout-"))
    tasks = make_task(tmp / "tasks")
    turns = [{"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}], "delay_s": latency}
             for _ in range(args.turns - 1)] + [{"content": "done", "delay_s": latency}]
    script = tmp / "script.yaml"
    script.write_text(yaml.safe_dump(turns))
    moto, endpoint, uri = None, None, str(tmp / "store")
    if args.store == "s3":
        moto, endpoint, uri = start_moto(tmp)
    sandbox = [f"sandbox.local.root_dir={tmp / 'sandboxes'}", "sandbox.local.limits=false"]
    if args.sandbox == "none":
        os.environ[GUARD_ENV] = "1"  # before Ray starts: its workers inherit it
        sandbox = ["sandbox.backend=none"]
    cfg = load_config([
        f"benchmark.path={tasks}", "agent=scripted", f"agent.script={script}", f"run.seeds={args.trials}",
        f"run.max_in_flight={max_in_flight}", f"run.executor={args.executor}", f"run.workers={args.workers}",
        "run.max_attempts=1", f"store.uri={uri}", "run.progress=false", *sandbox,
        *([f"store.endpoint_url={endpoint}"] if endpoint else []),
    ])

    me = os.getpid()
    excluded = {moto.pid} if moto else set()
    state: dict[str, Any] = {"in_flight": 0, "peak": 0, "done": 0, "first": None, "last": None, "base": None,
                             "samples": []}

    def orchestrator() -> tuple[float, float]:
        """(RSS of the driver + the Ray worker actors, PSS of every process the run started)."""
        rss = rss_mib(me) + sum(rss_mib(p) for p in worker_pids())
        pss = pss_mib(me) + sum(pss_mib(p) for p in descendants(me) if p not in excluded)
        return rss, pss

    def hook(event: str, outcome: object) -> None:
        if event == "start":
            if state["base"] is None:  # Ray and its actors are up, no trial has started yet
                state["base"] = orchestrator()
                state["first"] = time.monotonic()
            state["in_flight"] += 1
            state["peak"] = max(state["peak"], state["in_flight"])
            if state["in_flight"] == max_in_flight:
                # one sample when the pool is full: a short run can be over between two of the
                # sampler's 0.5 s ticks, which left the per-trial memory undefined
                state["samples"].append((state["in_flight"], *orchestrator()))
        elif event in ("done", "retry"):
            state["in_flight"] -= 1
            state["done"] += event == "done"
            state["last"] = time.monotonic()

    # scheduling overhead of an attempt: driver -> worker until run_trial starts, plus worker ->
    # driver after it finished (the same clock: one machine)
    sched: list[float] = []
    make_executor = driver.make_executor

    def timed_executor(c: Any) -> Any:
        ex = make_executor(c)
        submit = ex.submit

        async def timed(job: Any) -> Any:
            sent = time.time()
            out = await submit(job)
            got = time.time()
            r = out.result
            if r.started_at and r.finished_at:
                sched.append((r.started_at - sent) + (got - r.finished_at))
            return out

        ex.submit = timed
        return ex

    driver.make_executor = timed_executor

    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            if state["base"] is not None:
                n = state["in_flight"]
                state["samples"].append((n, *orchestrator()))
            stop.wait(0.5)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.monotonic()
    try:
        summary = asyncio.run(driver.run_experiment(cfg, progress=hook))
        wall = time.monotonic() - t0
        stop.set()
        t.join()
        store = ResultStore.open(uri, endpoint)
        rows = store.read_trials(summary.run_id).to_pylist()
        n_steps = store.read_steps(summary.run_id).num_rows
        objects = count_objects(uri, endpoint, summary.run_id)
    finally:
        stop.set()
        if moto:
            moto.terminate()
            moto.wait(10)

    parts = ("llm_s", "tool_s", "verify_s", "sandbox_start_s")
    overhead = [r["wall_s"] - sum(r[p] or 0 for p in parts) for r in rows if r["wall_s"] is not None]
    starts = [r["sandbox_start_s"] for r in rows if r["sandbox_start_s"] is not None]
    busy = [s for s in state["samples"] if s[0] >= 0.9 * state["peak"]]
    base_rss, base_pss = state["base"] or (0.0, 0.0)
    peak_rss = max((s[1] for s in busy), default=0.0)
    peak_pss = max((s[2] for s in busy), default=0.0)
    peak = state["peak"]
    per_trial = (peak_rss - base_rss) / peak if peak and busy else float("nan")
    per_trial_all = (peak_pss - base_pss) / peak if peak and busy else float("nan")
    span = (state["last"] or t0) - (state["first"] or t0)
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    load = os.getloadavg()

    print(f"\nfanout: {args.trials} trials × {args.turns} turns × {latency:g} s, sandbox={args.sandbox}, "
          f"store={args.store}, executor={args.executor}, workers={args.workers}, max_in_flight={max_in_flight}, "
          f"{os.cpu_count()} cores, load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{'metric':52} {'value':>14}")
    table = [
        ("wall time (s)", f"{wall:.1f}"),
        ("ideal trial time (turns × latency, s)", f"{args.turns * latency:.1f}"),
        ("peak trials in flight", f"{peak}"),
        ("driver + workers RSS before / at peak (MiB)", f"{base_rss:.0f} / {peak_rss:.0f}"),
        ("driver + workers RSS per in-flight trial (MiB)", f"{per_trial:.3f}"),
        ("all run processes PSS before / at peak (MiB)", f"{base_pss:.0f} / {peak_pss:.0f}"),
        ("all run processes PSS per in-flight trial (MiB)", f"{per_trial_all:.3f}"),
        ("completed trials / s", f"{state['done'] / span if span > 0 else float('nan'):.1f}"),
        ("scheduling overhead p50 / p95 (ms)", f"{q(sched, 50) * 1000:.1f} / {q(sched, 95) * 1000:.1f}"),
        ("in-trial overhead p50 / p95 (s)", f"{q(overhead, 50):.2f} / {q(overhead, 95):.2f}"),
        ("sandbox start p50 / p95 (s)", f"{q(starts, 50):.3f} / {q(starts, 95):.3f}"),
        ("Parquet rows (trials + steps) / s", f"{(len(rows) + n_steps) / span if span > 0 else float('nan'):.0f}"),
        ("store objects per 100 trials", f"{100 * objects / max(1, len(rows)):.1f}"),
        ("outcomes", " ".join(f"{k}={v}" for k, v in sorted(statuses.items()))),
    ]
    for name, value in table:
        print(f"{name:52} {value:>14}")
    if args.json:
        print(json.dumps({
            "trials": args.trials, "turns": args.turns, "latency_s": latency, "sandbox": args.sandbox,
            "store": args.store, "executor": args.executor, "workers": args.workers, "max_in_flight": max_in_flight,
            "wall_s": round(wall, 2), "peak_in_flight": peak,
            "rss_mib_per_in_flight_trial": round(per_trial, 4),
            "pss_mib_per_in_flight_trial_all": round(per_trial_all, 4),
            "rss_mib_base": round(base_rss, 1), "rss_mib_peak": round(peak_rss, 1),
            "trials_per_s": round(state["done"] / span, 2) if span > 0 else None,
            "sched_overhead_ms_p50": round(q(sched, 50) * 1000, 3),
            "sched_overhead_ms_p95": round(q(sched, 95) * 1000, 3),
            "parquet_rows_per_s": round((len(rows) + n_steps) / span, 1) if span > 0 else None,
            "objects_per_100_trials": round(100 * objects / max(1, len(rows)), 2),
            "rows": len(rows), "step_rows": n_steps, "outcomes": statuses, "cores": os.cpu_count(),
            "loadavg": [round(x, 2) for x in load],
        }))


if __name__ == "__main__":
    main()
