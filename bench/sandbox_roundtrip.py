"""Sandbox latency: start, exec round trip, 1 MiB read/write.

    .venv/bin/python bench/sandbox_roundtrip.py [--starts 20] [--execs 200] [--io 50]

Prints one table (p50/p95 in milliseconds). Runs real bubblewrap sandboxes with the default
limits; nothing else on the machine should be busy while it runs.

Where a container sandbox's start goes (sandbox=docker, farm's ContainerSandbox on podman):

    .venv/bin/python bench/sandbox_roundtrip.py --backend docker [--starts 20] [--execs 200]

Each start is from a cached image (the bare Debian image and toolbox image the podman tests
build and cache, bench/container_backend.py; made on the first run, never pulled) and is split
into: the image check and pod spec, the volume and the toolbox init container that fills it, the task
container's create and start (from podman's event log: ``run -d`` issued to its create event,
create to start event), ``run -d`` returning plus the cgroup lookup, the sandbox agent
answering its first ping (exec stream, relay, agent), and the log dirs (one exec); then the
close, and on the first sandbox the exec `true` and protocol ping round trips. Same table.

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
    print("\n".join(table(rows)))


def table(rows: list[tuple[str, int, list[float]]]) -> list[str]:
    """The operations as printed: n, p50, p95 and mean in ms; a row without samples says so."""
    lines = [f"{'operation':<38} {'n':>5} {'p50 ms':>9} {'p95 ms':>9} {'mean ms':>9}"]
    for name, n, xs in rows:
        if not xs:
            lines.append(f"{name:<38} {n:>5} {'n/a':>9} {'n/a':>9} {'n/a':>9}")
            continue
        lines.append(f"{name:<38} {n:>5} {_pct(xs, 0.5):>9.2f} {_pct(xs, 0.95):>9.2f} {statistics.fmean(xs):>9.2f}")
    return lines


def start_rows(phases: list[dict[str, float]]) -> list[tuple[str, int, list[float]]]:
    """The rows of the container starts: the whole start, then each phase indented under it."""
    from bench.container_backend import PHASES

    rows = [("sandbox start from a cached image", len(phases), [p["whole"] for p in phases])]
    for name in PHASES:
        rows.append((f"  {name}", len(phases), [p[name] for p in phases if name in p]))
    return rows


async def _round_trips(sb, execs: int) -> list[tuple[str, int, list[float]]]:
    await sb.exec("true")  # warm
    return [("exec `true` round trip", execs, await _timed(execs, lambda: sb.exec("true"))),
            ("call ping round trip", execs, await _timed(execs, lambda: sb.call("ping")))]


async def docker_main(starts: int, execs: int) -> None:
    """Container starts from a cached image, phase by phase; exec and ping round trips on the first."""
    from bench.container_backend import docker_task, engine_version, prepare, timed_start

    cfg = prepare()
    task = docker_task("roundtrip")
    phases: list[dict[str, float]] = []
    close_ms: list[float] = []
    rest: list[tuple[str, int, list[float]]] = []
    load0 = os.getloadavg()[0]
    for i in range(starts):
        sb, phase = await timed_start(task, cfg)
        phases.append(phase)
        try:
            if i == 0:  # the round trips need one sandbox, not one per start
                rest = await _round_trips(sb, execs)
        finally:
            t0 = time.perf_counter()
            await sb.close()
            close_ms.append((time.perf_counter() - t0) * 1000)
    print(f"backend docker, engine {engine_version(cfg.engine)}")
    print(f"farm container sandbox round trips — {platform.node()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, image {task.environment.image}, no network, "
          f"load {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    print("\n".join(table([*start_rows(phases), ("sandbox close", starts, close_ms), *rest])))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["local", "docker"], default="local",
                    help="docker: farm's container backend on podman, each start split into its phases")
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--execs", type=int, default=200)
    ap.add_argument("--io", type=int, default=50)
    ap.add_argument("--starts-only", action="store_true", help="only start/close sandboxes, counting failures")
    ap.add_argument("--network", nargs="+", choices=list(MODES), default=["public-isolated"],
                    help="with --starts-only: the network modes to compare")
    ap.add_argument("--concurrency", type=int, default=1)
    a = ap.parse_args(argv)
    if a.backend == "docker" and a.starts_only:
        ap.error("--starts-only measures the local backend's network modes; --backend docker splits each start")
    if a.starts < 1 or a.execs < 1:
        ap.error("--starts and --execs: at least 1")
    return a


if __name__ == "__main__":
    a = parse_args()
    if a.backend == "docker":
        asyncio.run(docker_main(a.starts, a.execs))
    elif a.starts_only:
        asyncio.run(starts_only(a.starts, a.network, a.concurrency))
    else:
        asyncio.run(main(a.starts, a.execs, a.io))
