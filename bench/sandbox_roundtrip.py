"""Local sandbox latency: start, exec round trip, 1 MiB read/write.

    .venv/bin/python bench/sandbox_roundtrip.py [--starts 20] [--execs 200] [--io 50]

Prints one table (p50/p95 in milliseconds). Runs real bubblewrap sandboxes with the default
limits; nothing else on the machine should be busy while it runs.

Start reliability per network mode (counts failed starts instead of stopping at the first):

    .venv/bin/python bench/sandbox_roundtrip.py --starts-only --starts 200 \
        --network public [--public-network isolated|host] [--concurrency 4]

"isolated" is a private network namespace with slirp4netns, "host" the host's network,
``--network no-network`` a private namespace without any interface but loopback.
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


def _task(network: str = "no-network") -> Task:
    return Task(
        benchmark="bench",
        task_id="roundtrip",
        instruction="",
        environment=Environment(image="python:3.11-slim", workdir="/app"),
        verifier=VerifierSpec(),
        agent_network=network,  # type: ignore[arg-type]
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


async def starts_only(n: int, network: str, public_network: str, concurrency: int) -> None:
    """Start and close n sandboxes, ``concurrency`` at a time; a failed start is counted."""
    gate = asyncio.Semaphore(concurrency)
    start_ms: list[float] = []
    failures: list[str] = []

    async def one() -> None:
        async with gate:
            sb = LocalSandbox(_task(network), public_network=public_network)
            t0 = time.perf_counter()
            try:
                await sb.start()
                start_ms.append((time.perf_counter() - t0) * 1000)
            except Exception as e:  # the count is the result; the first few are shown below
                failures.append(str(e))
            finally:
                await sb.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    wall = time.perf_counter() - t0
    mode = network if network != "public" else f"public ({public_network})"
    print(f"farm local sandbox starts — {platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
          f"network {mode}, concurrency {concurrency}")
    print(f"starts {n}  failed {len(failures)}  wall {wall:.1f} s")
    if start_ms:
        print(f"start ms  p50 {_pct(start_ms, 0.5):.1f}  p95 {_pct(start_ms, 0.95):.1f}  max {max(start_ms):.1f}")
    for msg in failures[:3]:
        print("  failure:", msg[-300:])


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

    print(f"farm local sandbox round trips — {platform.node()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, limits: {limits}")
    print(f"{'operation':<38} {'n':>5} {'p50 ms':>9} {'p95 ms':>9} {'mean ms':>9}")
    for name, n, xs in rows:
        print(f"{name:<38} {n:>5} {_pct(xs, 0.5):>9.2f} {_pct(xs, 0.95):>9.2f} {statistics.fmean(xs):>9.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--execs", type=int, default=200)
    ap.add_argument("--io", type=int, default=50)
    ap.add_argument("--starts-only", action="store_true", help="only start/close sandboxes, counting failures")
    ap.add_argument("--network", choices=("no-network", "public"), default="no-network")
    ap.add_argument("--public-network", choices=("isolated", "host"), default="isolated")
    ap.add_argument("--concurrency", type=int, default=1)
    a = ap.parse_args()
    if a.starts_only:
        asyncio.run(starts_only(a.starts, a.network, a.public_network, a.concurrency))
    else:
        asyncio.run(main(a.starts, a.execs, a.io))
