"""Local sandbox latency: start, exec round trip, 1 MiB read/write.

    .venv/bin/python bench/sandbox_roundtrip.py [--starts 20] [--execs 200] [--io 50]

Prints one table (p50/p95 in milliseconds). Runs real bubblewrap sandboxes with the default
limits; nothing else on the machine should be busy while it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from farm.sandbox.local import LocalSandbox  # noqa: E402
from farm.tasks.model import Environment, Task, VerifierSpec  # noqa: E402


def _task() -> Task:
    return Task(
        benchmark="bench",
        task_id="roundtrip",
        instruction="",
        environment=Environment(image="python:3.11-slim", workdir="/app"),
        verifier=VerifierSpec(),
        agent_network="no-network",
    )


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


async def _timed(n: int, fn) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def main(starts: int, execs: int, io: int) -> None:
    rows: list[tuple[str, int, list[float]]] = []
    start_ms, close_ms = [], []
    for _ in range(starts):
        sb = LocalSandbox(_task())
        t0 = time.perf_counter()
        await sb.start()
        start_ms.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        await sb.close()
        close_ms.append((time.perf_counter() - t0) * 1000)
    rows.append(("sandbox start (bwrap + agent ping)", starts, start_ms))
    rows.append(("sandbox close", starts, close_ms))

    async with LocalSandbox(_task()) as sb:
        limits = sb.stats.extra.get("limits", "")
        await sb.exec("true")  # warm
        rows.append(("exec `true` round trip", execs, await _timed(execs, lambda: sb.exec("true"))))
        rows.append(("call ping round trip", execs, await _timed(execs, lambda: sb.call("ping"))))
        blob = os.urandom(1 << 20)
        rows.append(("write_file 1 MiB", io, await _timed(io, lambda: sb.write_file("/tmp/b", blob))))
        rows.append(("read_file 1 MiB", io, await _timed(io, lambda: sb.read_file("/tmp/b"))))
        big = os.urandom(50 << 20)
        rows.append(("write_file 50 MiB", 3, await _timed(3, lambda: sb.write_file("/tmp/big", big))))
        rows.append(("read_file 50 MiB", 3, await _timed(3, lambda: sb.read_file("/tmp/big"))))

    print(f"farm local sandbox round trips — {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, limits: {limits}")
    print(f"{'operation':<38} {'n':>5} {'p50 ms':>9} {'p95 ms':>9} {'mean ms':>9}")
    for name, n, xs in rows:
        print(f"{name:<38} {n:>5} {_pct(xs, 0.5):>9.2f} {_pct(xs, 0.95):>9.2f} {statistics.fmean(xs):>9.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--execs", type=int, default=200)
    ap.add_argument("--io", type=int, default=50)
    a = ap.parse_args()
    asyncio.run(main(a.starts, a.execs, a.io))
