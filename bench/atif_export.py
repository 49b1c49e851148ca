"""`farm export --format atif` memory and time: the streamed export against the in-memory one.

    .venv/bin/python bench/atif_export.py [--trials 5000] [--steps 20] [--per-file 64]

Writes a synthetic run (``--trials`` trials of ``--steps`` model calls, ~1.3 KB of messages a
call, half of it random, ``--per-file`` trials a file as the batch writer commits them) into a temporary store,
then exports it twice, each in a fresh process: ``export_run(load_run(...))`` (the whole steps
table in memory) and ``export_store_run`` (streamed). Prints one table: seconds, peak RSS, and
the most step rows the streamed export held.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from farm.store.results import ResultStore  # noqa: E402
from farm.store.schema import STEPS_SCHEMA, TRIALS_SCHEMA  # noqa: E402
from farm.view.data import file_schema  # noqa: E402

CHILD = """
import json, resource, sys, time
from pathlib import Path
from farm.report.atif import export_run, export_store_run
from farm.report.data import load_run
from farm.store.results import ResultStore
store, mode, out = ResultStore.open(sys.argv[1], create=False), sys.argv[2], Path(sys.argv[3])
t0 = time.perf_counter()
s = export_run(load_run(store, "big"), out) if mode == "memory" else export_store_run(store, "big", out)
print(json.dumps({"s": time.perf_counter() - t0, "docs": len(s.written), "peak_rows": s.scan.peak_rows,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _full(schema: pa.Schema, columns: dict) -> pa.Table:
    n = len(next(iter(columns.values())))
    fs = file_schema(schema)
    return pa.table({f.name: columns.get(f.name, pa.nulls(n, f.type)) for f in fs}, schema=fs)


def write_run(root: Path, n: int, steps: int, per_file: int) -> int:
    """The run in the store's layout; returns the steps table's rows."""
    store = ResultStore.open(str(root))
    store.write_run_meta("big", {"run_id": "big", "config_hash": "c", "config": {}})
    call = {"id": "c", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}

    def msg() -> str:  # tool output that does not compress to nothing, as real output does not
        return json.dumps([{"role": "assistant", "content": "x" * 300, "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": "c", "content": os.urandom(450).hex()}])
    keys = [f"t{i:06d}" for i in range(n)]
    for name in ("steps", "trials"):
        (root / name / "run_id=big").mkdir(parents=True)
    for f, start in enumerate(range(0, n, per_file)):
        part = keys[start:start + per_file]
        st = _full(STEPS_SCHEMA, {
            "trial_key": [k for k in part for _ in range(steps)],
            "attempt": pa.array([1] * len(part) * steps, pa.int64()),
            "step": pa.array([j for _ in part for j in range(steps)], pa.int64()),
            "attempt_uid": [f"u{k}" for k in part for _ in range(steps)],
            "messages_json": [msg() for _ in range(len(part) * steps)],
            "tool_names": [["Bash"]] * len(part) * steps})
        tr = _full(TRIALS_SCHEMA, {
            "trial_key": part, "benchmark": ["b"] * len(part), "task_id": [f"task-{k}" for k in part],
            "seed": pa.array([0] * len(part), pa.int64()), "arm": ["base"] * len(part),
            "attempt": pa.array([1] * len(part), pa.int64()), "status": ["unresolved"] * len(part),
            "steps": pa.array([steps] * len(part), pa.int64()), "attempt_uid": [f"u{k}" for k in part]})
        pq.write_table(st, root / "steps" / "run_id=big" / f"part-{f:05d}.parquet")
        pq.write_table(tr, root / "trials" / "run_id=big" / f"part-{f:05d}.parquet")
    return n * steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--per-file", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="atif-bench-") as tmp:
        rows = write_run(Path(tmp) / "store", args.trials, args.steps, args.per_file)
        size = sum(p.stat().st_size for p in (Path(tmp) / "store" / "steps").rglob("*.parquet"))
        results = {}
        for mode in ("memory", "streamed"):
            done = subprocess.run([sys.executable, "-c", CHILD, str(Path(tmp) / "store"), mode, str(Path(tmp) / mode)],
                                  capture_output=True, text=True, check=True)
            results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{args.trials} trials x {args.steps} steps ({rows} step rows, {size / 1e6:.0f} MB of steps Parquet in "
          f"{-(-args.trials // args.per_file)} files); {platform.node()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d')}\n")
    print("| export | seconds | peak RSS MB | step rows held at most |\n|---|---|---|---|")
    for mode, r in results.items():
        held = r["peak_rows"] if mode == "streamed" else rows
        print(f"| {mode} | {r['s']:.1f} | {r['rss_mb']:.0f} | {held} |")


if __name__ == "__main__":
    main()
