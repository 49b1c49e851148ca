"""Local sandbox latency: start, exec round trip, 1 MiB read/write.

    .venv/bin/python bench/sandbox_roundtrip.py [--starts 20] [--execs 200] [--io 50]

Prints one table (p50/p95 in milliseconds). Runs real bubblewrap sandboxes with the default
limits; nothing else on the machine should be busy while it runs.

Start reliability and latency per network mode (failed starts are counted, not fatal; the
modes take turns, so that a change in the machine's load hits them alike):

    .venv/bin/python bench/sandbox_roundtrip.py --starts-only --starts 200 [--concurrency 4] \\
        [--network no-network public-host public-isolated]

public-isolated (what a public task gets by default) is a private network namespace with
slirp4netns; public-host shares the host's network; no-network has only loopback.
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

from farm.sandbox.local import sandbox as local  # noqa: E402
from farm.sandbox.local.sandbox import JAIL_ENV, LocalSandbox  # noqa: E402


def _without_jail(make_argv):
    """bwrap_argv without the jail request: the agent's commands run beside the sandbox agent."""
    def argv(*args, **kwargs):
        out = make_argv(*args, **kwargs)
        at = out.index(JAIL_ENV) - 1  # "--setenv", JAIL_ENV, value
        return out[:at] + out[at + 3:]
    return argv
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


MODES = {  # name -> (task network, sandbox.local.public_network)
    "no-network": ("no-network", "isolated"),
    "public-host": ("public", "host"),
    "public-isolated": ("public", "isolated"),
}


async def starts_only(n: int, modes: list[str], concurrency: int) -> None:
    """Start and close n sandboxes per mode, ``concurrency`` at a time; a failed start is counted."""
    gate = asyncio.Semaphore(concurrency)
    start_ms: dict[str, list[float]] = {m: [] for m in modes}
    failures: dict[str, list[str]] = {m: [] for m in modes}

    async def one(mode: str) -> None:
        network, public_network = MODES[mode]
        async with gate:
            sb = LocalSandbox(_task(network), public_network=public_network)
            t0 = time.perf_counter()
            try:
                await sb.start()
                start_ms[mode].append((time.perf_counter() - t0) * 1000)
            except Exception as e:  # the count is the result; the first few are shown below
                failures[mode].append(str(e))
            finally:
                await sb.close()

    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    await asyncio.gather(*(one(m) for _ in range(n) for m in modes))
    wall = time.perf_counter() - t0
    print(f"farm local sandbox starts — {platform.node()}, {os.cpu_count()} CPUs, "
          f"load {load0:.2f} -> {os.getloadavg()[0]:.2f}, concurrency {concurrency}, wall {wall:.1f} s")
    print(f"{'network':<16} {'starts':>6} {'failed':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    for m in modes:
        xs = start_ms[m] or [float("nan")]
        print(f"{m:<16} {n:>6} {len(failures[m]):>6} {_pct(xs, 0.5):>8.1f} {_pct(xs, 0.95):>8.1f} {max(xs):>8.1f}")
    for m in modes:
        for msg in failures[m][:2]:
            print(f"  {m} failure:", msg[-300:])


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

    # The agent's commands in their own PID namespace (inside/jail.py) against the same sandbox
    # without it, in alternating blocks so that a change in the machine's load hits both alike.
    jailed, plain = LocalSandbox(_task()), LocalSandbox(_task())
    await jailed.start()
    real_argv = local.bwrap_argv
    local.bwrap_argv = _without_jail(real_argv)
    try:
        await plain.start()
    finally:
        local.bwrap_argv = real_argv
    try:
        assert jailed.stats.isolation == "pid-namespace+proc" and str(plain.stats.isolation).startswith("none")
        in_jail: list[float] = []
        beside: list[float] = []
        for _ in range(10):
            in_jail += await _timed(max(1, execs // 10), lambda: jailed.exec("true"))
            beside += await _timed(max(1, execs // 10), lambda: plain.exec("true"))
    finally:
        await jailed.close()
        await plain.close()

    async with LocalSandbox(_task()) as sb:
        limits = sb.stats.extra.get("limits", "")
        await sb.exec("true")  # warm
        rows.append(("exec `true` round trip", execs, await _timed(execs, lambda: sb.exec("true"))))
        rows.append(("  same, in the PID namespace (default)", len(in_jail), in_jail))
        rows.append(("  same, beside the sandbox agent", len(beside), beside))
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
    ap.add_argument("--network", nargs="+", choices=list(MODES), default=["public-isolated"],
                    help="with --starts-only: the network modes to compare")
    ap.add_argument("--concurrency", type=int, default=1)
    a = ap.parse_args()
    if a.starts_only:
        asyncio.run(starts_only(a.starts, a.network, a.concurrency))
    else:
        asyncio.run(main(a.starts, a.execs, a.io))
