"""Faults at scale, one command: does every trial still land exactly once? (issue 29, item 6)

Runs the same run twice on a three-node Ray cluster on this machine (``ray.cluster_utils``:
a head and two worker nodes, each its own raylet): a fault-free pass, then a pass with a fixed
fault schedule drawn from ``--seed``:

- **node lost** x2: a worker node's raylet SIGKILLed (its trials are ``worker_lost`` attempts
  and re-run on the nodes left);
- **503 storm**: every write to the store answered 503 SlowDown for ``--storm-s`` seconds
  (tests/support/s3faults.py, a proxy in front of a moto S3 server; ``--store s3`` only);
- **model endpoint restarted**: farm's policy server, serving the model, SIGKILLed and started
  again on the same port after ``--restart-gap-s`` (requests wait within
  ``model.request_retry_budget_s``);
- **failed starts**: the next ``--burst-starts`` sandbox starts refused, wherever they run
  (``FARM_BENCH_NULL_FAIL_STARTS``: a directory of tokens, one per start to fail, read by the
  benchmark-only null sandbox).

The faults fire at seeded fractions of the fault-free pass's wall time, so they hit trials in
flight on any machine. The agents are cheap so that 2,000 trials fit on two cores: the leaf
agent against the scripted policy server (``--turns`` turns, one Bash call each) in the
null sandbox (farm/sandbox/none: nothing runs, the reward is a constant; its rows measure
no agent). The circuit breaker is off (``run.breaker_consecutive=0``): it stops a run whose
infrastructure is down, and this measures recovery from faults that pass.

What it prints, per pass: trials planned; rows (trials whose last row is a result, not an
infra_error); duplicates ((trial, attempt) pairs stored twice, plus trials with more than one
result row); lost (planned trials without a result row); attempts per trial; attempts that
ran without an admission in the ledger; wall time and its ratio to the fault-free pass;
faults injected; the worst start queue (most trials waiting for a start slot at once).

    .venv/bin/python bench/chaos.py --trials 2000 --store s3
    .venv/bin/python bench/chaos.py --trials 40 --json      # one JSON line, the chaos pass's numbers
    .venv/bin/python bench/chaos.py --trials 40 --json-out chaos.json   # the same, in a file
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from fanout import make_task, start_moto  # noqa: E402

from farm.config import load_config  # noqa: E402
from farm.run.driver import run_experiment  # noqa: E402
from farm.run.workers import ray_env  # noqa: E402
from farm.sandbox.none.sandbox import FAIL_STARTS_ENV, GUARD_ENV  # noqa: E402
from farm.store import ResultStore  # noqa: E402
from tests.support.s3faults import FaultPlan, FaultProxy  # noqa: E402

# the GCS declares a silent raylet dead after period x threshold: seconds, not half a minute.
# On a starved machine (load 15 on two cores) a live raylet can miss that and be declared dead;
# the pool replaces a worker lost that way at its start too (farm/run/workers.py _until_up).
# 5 s instead moved the kills' timing so far that the 3 s store storm met no write (tried).
FAST_HEALTH_CHECK = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                     "health_check_failure_threshold": 3}
FAULTS = ("node_lost", "node_lost", "store_503_storm", "endpoint_restart", "failed_starts")


def schedule(seed: int, store: str) -> list[tuple[float, str]]:
    """(fraction of the fault-free wall time, fault), in firing order: the same for a seed."""
    rng = random.Random(seed)
    faults = [f for f in FAULTS if store == "s3" or f != "store_503_storm"]
    rng.shuffle(faults)
    # spread over 10-80 % of the run, at least 8 % apart, so one fault's recovery is not the next's
    slots = sorted(rng.sample(range(10, 81, 8), len(faults)))
    return [(s / 100, f) for s, f in zip(slots, faults, strict=True)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PolicyServer:
    """farm's scripted policy server as its own process on a fixed port, so it can be restarted."""

    def __init__(self, script: Path) -> None:
        self.script, self.port = script, free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "farm.agent.policies.server", "scripted",
                                      "--script", str(self.script), "--port", str(self.port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""  # printed once it listens
        if line.strip() != self.base_url:
            raise SystemExit(f"policy server did not start: {line!r}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


class Cluster:
    """A head and two worker nodes, all started (and stopped) by this script."""

    def __init__(self, cpus_per_node: int) -> None:
        import ray
        from ray.cluster_utils import Cluster as RayCluster

        os.environ.update(ray_env())
        # joining 127.0.0.1 must not be rewritten to an outward address (tests/run/test_ray_node_loss.py)
        ray._private.ray_constants.ENABLE_RAY_CLUSTER = False
        self.cluster = RayCluster(initialize_head=True, head_node_args={
            "num_cpus": cpus_per_node, "node_ip_address": "127.0.0.1", "include_dashboard": False,
            "_system_config": FAST_HEALTH_CHECK})
        self.nodes = [self.cluster.add_node(num_cpus=cpus_per_node, node_ip_address="127.0.0.1",
                                            resources={f"node{i}": 1}) for i in (1, 2)]
        ray.init(address=self.cluster.address, log_to_driver=False)
        for i in (1, 2):  # until the scheduler sees both worker nodes, workers would all land on the head
            ray.get(ray.remote(num_cpus=0, resources={f"node{i}": 0.01})(lambda: None).remote(), timeout=120)
        self.killed = 0

    def kill_node(self) -> None:
        node = self.nodes[self.killed % len(self.nodes)]
        self.killed += 1
        os.kill(node.all_processes["raylet"][0].process.pid, signal.SIGKILL)

    def close(self) -> None:
        import ray

        ray.shutdown()
        self.cluster.shutdown()


def run_pass(name: str, args: argparse.Namespace, tmp: Path, tasks: Path, faults: list[tuple[float, str]],
             clean_wall: float | None) -> dict[str, Any]:
    script = tmp / "script.yaml"
    turns = [{"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}], "delay_s": args.latency}
             for _ in range(args.turns - 1)] + [{"content": "done", "delay_s": args.latency}]
    script.write_text(yaml.safe_dump(turns))
    switch = tmp / f"{name}-fail-starts"
    switch.mkdir()
    os.environ[GUARD_ENV] = "1"  # before Ray starts: its workers inherit both
    os.environ[FAIL_STARTS_ENV] = str(switch)
    policy = PolicyServer(script)
    moto = proxy = None
    plan = FaultPlan(seed=args.seed)  # no random faults: only the storm the schedule switches on
    store_args: list[str]
    if args.store == "s3":
        moto, endpoint, uri = start_moto(tmp / name)
        proxy = FaultProxy(endpoint, plan)
        uri = f"{uri}-{name}"
        store_args = [f"store.uri={uri}", f"store.endpoint_url={proxy.endpoint}"]
    else:
        endpoint, uri = None, str(tmp / f"store-{name}")
        store_args = [f"store.uri={uri}"]
    cluster = Cluster(args.cpus_per_node)
    fired: Counter[str] = Counter()
    try:
        cfg = load_config([
            f"benchmark.path={tasks}", "agent=leaf", "agent.tokenizer=bytes", "model=endpoint",
            f"model.base_url={policy.base_url}", "model.name=scripted", "sandbox.backend=none",
            f"run.seeds={args.trials}", f"run.max_in_flight={args.max_in_flight or args.trials}",
            "run.executor=ray", f"run.ray_address={cluster.cluster.address}", f"run.workers={args.workers}",
            f"run.max_concurrent_starts={args.max_concurrent_starts}", "run.max_attempts=6",
            "run.retry_backoff_s=0.5", "run.breaker_consecutive=0", "run.progress=false", "run.preflight=false",
            f"run.id=chaos-{name}", *store_args])

        async def inject(fault: str) -> None:
            fired[fault] += 1
            if fault == "node_lost":
                cluster.kill_node()
            elif fault == "store_503_storm":
                plan.fail_writes()
                # storm_s at least, and until a write met it: rows are written in batches, and a
                # short run can go a whole 3 s without one (the storm then tested nothing)
                t0 = time.monotonic()
                while (time.monotonic() - t0 < args.storm_s
                       or (not sum(plan.injected.values()) and time.monotonic() - t0 < args.storm_s + 60)):
                    await asyncio.sleep(0.1)
                with plan.lock:
                    plan.writes_failing = False
            elif fault == "endpoint_restart":
                policy.kill()
                await asyncio.sleep(args.restart_gap_s)
                await asyncio.to_thread(policy.start)
            elif fault == "failed_starts":
                for i in range(args.burst_starts):
                    (switch / f"{i:05d}").touch()

        async def main() -> tuple[Any, float]:
            t0 = time.monotonic()
            run = asyncio.create_task(run_experiment(cfg))
            # each fault on its own task: a storm or a restart in progress does not delay the next
            injecting = []
            for frac, fault in faults:
                assert clean_wall is not None
                wait = t0 + frac * clean_wall - time.monotonic()
                done, _ = await asyncio.wait({run}, timeout=max(0.0, wait))
                if done:
                    break
                injecting.append(asyncio.create_task(inject(fault)))
            summary = await run
            wall = time.monotonic() - t0
            await asyncio.gather(*injecting)  # a storm or a server still down ends before the next pass
            return summary, wall

        summary, wall = asyncio.run(main())
    except BaseException:
        if moto is not None:  # the pass failed: the S3 server it started goes too, not only on success
            moto.terminate()
            moto.wait(10)
        raise
    finally:
        cluster.close()
        policy.kill()
        if proxy is not None:
            proxy.close()
        shutil.rmtree(switch, ignore_errors=True)
    try:
        store = ResultStore.open(uri, endpoint, create=False)  # read past the proxy
        rows = store.read_trials(summary.run_id, dedupe=False).to_pylist()
        admitted = store.read_admitted(summary.run_id)
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(10)
    results = Counter(r["trial_key"] for r in rows if r["status"] != "infra_error")
    pairs = Counter((r["trial_key"], r["attempt"]) for r in rows)
    s3_faults = sum(plan.injected.values())
    injected = {"node_lost": fired["node_lost"], "store_503": s3_faults, "endpoint_restart": fired["endpoint_restart"],
                "failed_starts": sum(1 for r in rows if (r["error_class"] or "").startswith("sandbox_start"))}
    return {
        "pass": name,
        "trials": summary.planned,
        "rows": len(results),
        "duplicates": sum(n - 1 for n in pairs.values() if n > 1) + sum(n - 1 for n in results.values() if n > 1),
        "lost": summary.planned - len(results),
        "attempts_per_trial": round(len(rows) / max(1, summary.planned), 3),
        "worker_lost": sum(1 for r in rows if r["error_class"] == "worker_lost"),
        # a result whose attempt was never admitted: an agent run the ledger cannot account for
        "unledgered": sum(1 for r in rows
                          if r["status"] != "infra_error" and (r["trial_key"], r["attempt"]) not in admitted),
        "wall_s": round(wall, 1),
        "wall_ratio": round(wall / clean_wall, 3) if clean_wall else 1.0,
        "faults_injected": sum(fired.values()),  # scheduled fault events that fired before the run ended
        "faults": injected,
        "worst_start_queue": summary.peak_phases.get("waiting"),
    }


COLUMNS = ("pass", "trials", "rows", "duplicates", "lost", "attempts_per_trial", "worker_lost", "unledgered",
           "wall_s", "wall_ratio", "faults_injected", "worst_start_queue")


def table(passes: list[dict[str, Any]]) -> str:
    widths = [max(len(c), *(len(str(p[c])) for p in passes)) for c in COLUMNS]
    lines = ["  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths, strict=True))]
    lines += ["  ".join(str(p[c]).rjust(w) for c, w in zip(COLUMNS, widths, strict=True)) for p in passes]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--store", choices=["s3", "local"], default="s3", help="s3: moto on 127.0.0.1 behind a fault proxy")
    ap.add_argument("--seed", type=int, default=29, help="draws the fault schedule")
    ap.add_argument("--workers", type=int, default=3, help="Ray worker actors (round-robin over the three nodes)")
    ap.add_argument("--cpus-per-node", type=int, default=1)
    ap.add_argument("--max-in-flight", type=int, default=None,
                    help="run.max_in_flight (default: a quarter of --trials)")
    ap.add_argument("--max-concurrent-starts", type=int, default=50)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.3, help="seconds per model turn")
    ap.add_argument("--storm-s", type=float, default=3.0)
    ap.add_argument("--restart-gap-s", type=float, default=1.0)
    ap.add_argument("--burst-starts", type=int, default=None,
                    help="sandbox starts the failed-start burst refuses (default: a tenth of --trials, at most 50; "
                         "at 12 trials 50 refusals made a trial use 5 of its 6 attempts)")
    ap.add_argument("--json", action="store_true", help="print the chaos pass as one JSON line instead of the table")
    # Ray may still print to stdout after the JSON line (its log-dedup notice at shutdown), so a
    # caller that parses the result reads this file rather than the last line of stdout
    ap.add_argument("--json-out", type=Path, default=None, help="also write the chaos pass as JSON to this file")
    args = ap.parse_args()
    # a timeout's SIGTERM unwinds like an error, so every server a pass started is stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.max_in_flight = args.max_in_flight or max(1, args.trials // 4)
    args.burst_starts = args.burst_starts if args.burst_starts is not None else max(1, min(50, args.trials // 10))
    tmp = Path(tempfile.mkdtemp(prefix="farm-chaos-"))
    tasks = make_task(tmp / "tasks")
    clean = run_pass("clean", args, tmp, tasks, [], None)
    faults = schedule(args.seed, args.store)
    chaos = run_pass("chaos", args, tmp, tasks, faults, clean["wall_s"])
    chaos["schedule"] = [f"{f}@{frac:.0%}" for frac, f in faults]
    if args.json_out:
        args.json_out.write_text(json.dumps(chaos))
    if args.json:
        print(json.dumps(chaos))
    else:
        print(table([clean, chaos]))
        print("faults:", json.dumps(chaos["faults"]), "schedule:", " ".join(chaos["schedule"]))
    bad = chaos["rows"] != chaos["trials"] or chaos["duplicates"] or chaos["lost"]
    sys.exit(1 if bad or clean["rows"] != clean["trials"] else 0)


if __name__ == "__main__":
    main()
