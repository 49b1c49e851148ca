"""Per-tool-call cost of the agent loop, per agent.compat setting side by side: `Bash true`.

    .venv/bin/python bench/harness_overhead.py [--calls 300] [--compat farm-safe,leaf-2609]
        [--rounds 5] [--mode sequential|concurrent] [--backend local|docker]
        [--peer-python <venv>/bin/python]

Runs the real loop against the real policy endpoint (HTTP) and one real sandbox; the
settings take turns in ``--rounds`` rounds, so that a machine whose load changes treats them
alike. ``--backend local`` (the default) is a LocalSandbox (bubblewrap); ``--backend docker``
is farm's container backend (ContainerSandbox) driving podman, on the bare Debian image and the
toolbox image the podman tests build and cache (bench/container_backend.py; made on the first
run from deb.debian.org, never pulled from a registry). The table is the same for both; its
header line names the backend and its engine. For every tool call it reports:

* whole tool call - the loop's dispatch to observation (what the model waits for);
* shell           - ``bash -lc true`` itself: timed inside the same sandbox by one measuring
                    process that starts it again and again with nothing of farm's in between
                    (its p50 is the reference). This is the only part that is NOT harness cost;
* harness         - whole tool call minus the shell, plus the loop bookkeeping: every process
                    farm starts around the shell (the jail's launcher, a per-call runner where
                    one exists), the channel, the sandbox agent and the tool rules;
  * processes     - the command as the sandbox agent times it (spawn to exit) minus the shell:
                    the processes farm starts around the shell;
  * channel+tools - whole tool call minus the command as the sandbox agent times it;
  * loop          - everything in a step that is neither the model call nor the tool batch;
* llm             - the round trip to the instant endpoint, reported separately: it is the
                    model's slot, not the harness's.

``--peer-python``: also run the peer anchor (shared/bench/peer_miniswe.py, mini-swe-agent in
that Python's venv) in the same command, after farm's rounds, and print its summary below.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from farm.agent import LLMClient, run_agent  # noqa: E402
from farm.agent.tokens import TokenCounter  # noqa: E402
from farm.config import CHOICES, AgentConfig, ModelConfig  # noqa: E402
from farm.sandbox.base import Sandbox  # noqa: E402
from farm.sandbox.local.sandbox import LocalSandbox  # noqa: E402
from farm.sandbox.relayed.manifests import PYTHON as BUNDLED_PYTHON  # noqa: E402
from farm.tasks.model import Environment, Task, VerifierSpec  # noqa: E402

BACKENDS = ("local", "docker")

# Starts `bash -lc true` N times from one process inside the sandbox and prints each run's
# seconds: the shell's own cost, with no farm process between it and its parent.
SHELL_PROGRAM = r"""
import os, sys, time
n = int(sys.argv[1])
out = []
for _ in range(n):
    t = time.perf_counter()
    pid = os.posix_spawn("/bin/bash", ["/bin/bash", "-lc", "true"], dict(os.environ))
    os.waitpid(pid, 0)
    out.append(time.perf_counter() - t)
print(" ".join("%.6f" % x for x in out))
"""


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def task() -> Task:
    return Task(benchmark="bench", task_id="overhead", instruction="bench",
                environment=Environment(workdir="/app", build_steps=()), verifier=VerifierSpec(),
                agent_timeout_s=3600)


async def one_run(sb: Sandbox, calls: int, compat: str, mode: str, tokenizer: str,
                  tmp: Path, bench_task: Task | None = None) -> dict[str, list[float]]:
    """``calls`` Bash true turns through run_agent under ``compat``; per-call parts in seconds."""
    turns = [{"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}]}] * calls + [{"content": "done"}]
    script = tmp / f"script-{compat}-{time.monotonic_ns()}.json"
    script.write_text(json.dumps(turns))
    # The endpoint runs in its own process, as a model server would: in this process its
    # thread would compete with the loop for the GIL and inflate the loop's numbers.
    server = subprocess.Popen(
        [sys.executable, "-c", "from farm.agent.policies.server import main; main()", "scripted", "--script",
         str(script)], stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        base_url = server.stdout.readline().strip()
        llm = LLMClient(ModelConfig(name="bench", base_url=base_url, max_retries=0),
                        session_id="bench", task_id="overhead")
        cfg = AgentConfig(max_steps=calls + 1, tool_execution=mode, tokenizer=tokenizer, compat=compat)
        marks: list[float] = []

        async def on_step(_rec) -> None:
            marks.append(time.perf_counter())

        try:
            marks.append(time.perf_counter())
            traj = await run_agent(bench_task or task(), sb, llm, cfg, session_id="bench", on_step=on_step)
        finally:
            await llm.close()
    finally:
        server.terminate()
        server.wait(10)
    assert traj.exit_reason == "agent", (traj.exit_reason, traj.error)
    out: dict[str, list[float]] = {"whole": [], "command": [], "loop": [], "llm": []}
    for i, step in enumerate(traj.steps[:-1]):
        (tc,) = step.tool_calls
        out["whole"].append(tc.duration_s)
        out["command"].append(tc.command_s or 0.0)
        out["loop"].append((marks[i + 1] - marks[i]) - step.latency_s - (step.tool_s or 0.0))
        out["llm"].append(step.latency_s)
    return out


@contextlib.asynccontextmanager
async def open_sandbox(backend: str, tmp: Path) -> AsyncIterator[tuple[Sandbox, Task, str]]:
    """The started sandbox, its task, and the Python that times the shell inside it: the host's
    python3 in bubblewrap; in a container, the bundled one (the task image has none)."""
    if backend == "local":
        local_task = task()
        async with LocalSandbox(local_task, root_dir=tmp / "sbx") as sb:
            yield sb, local_task, "python3"
        return
    from bench.container_backend import docker_task, prepare, started

    cfg = prepare()
    bench_task = docker_task("overhead")
    async with started(bench_task, cfg) as sb:
        yield sb, bench_task, BUNDLED_PYTHON


async def measure(calls: int, compats: list[str], rounds: int, mode: str, tokenizer: str,
                  backend: str = "local") -> tuple[list[float], dict[str, dict[str, list[float]]]]:
    per_round = max(1, calls // rounds)
    res: dict[str, dict[str, list[float]]] = {c: {} for c in compats}
    with tempfile.TemporaryDirectory() as tmp:
        async with open_sandbox(backend, Path(tmp)) as (sb, bench_task, python):
            for compat in compats:  # warm: the tools' modules, the page cache of the shell's files
                await sb.call("tool", name="Bash", args={"command": "true"}, workdir="/app", limits={"compat": compat})
            TokenCounter(tokenizer)  # load the vocabulary once, as a worker process would
            shell: list[float] = []
            for r in range(rounds):
                shell += await shell_times(sb, per_round, python)
                order = compats if r % 2 == 0 else compats[::-1]
                for compat in order:
                    part = await one_run(sb, per_round, compat, mode, tokenizer, Path(tmp), bench_task)
                    for key, values in part.items():
                        res[compat].setdefault(key, []).extend(values)
    return shell, res


async def shell_times(sb: Sandbox, n: int, python: str = "python3") -> list[float]:
    done = await sb.exec(f"{python} -I -S -c '{SHELL_PROGRAM}' {n}", cwd="/app", timeout_s=600)
    if done.exit_code != 0:
        raise SystemExit(f"timing the shell inside the sandbox failed: {done.output[-500:]}")
    return [float(x) for x in done.stdout.split()]


def table(shell: list[float], res: dict[str, dict[str, list[float]]]) -> list[str]:
    shell_p50 = pct(shell, .5)
    rows: dict[str, dict[str, list[float]]] = {}
    for compat, parts in res.items():
        whole, command, loop = parts["whole"], parts["command"], parts["loop"]
        rows.setdefault("whole tool call", {})[compat] = whole
        rows.setdefault("harness (all but the shell)", {})[compat] = [w - shell_p50 + lp for w, lp in zip(whole, loop)]
        rows.setdefault("  processes around the shell", {})[compat] = [c - shell_p50 for c in command]
        rows.setdefault("  channel + tools", {})[compat] = [w - c for w, c in zip(whole, command)]
        rows.setdefault("  loop bookkeeping", {})[compat] = loop
        rows.setdefault("llm round trip (instant)", {})[compat] = parts["llm"]
    compats = list(res)
    lines = [f"{'part (ms, p50 / p95)':<32}" + "".join(f"{c:>20}" for c in compats)]
    for label, by in rows.items():
        cells = "".join(f"{pct(by[c], .5) * 1000:>11.2f} /{pct(by[c], .95) * 1000:>7.2f}" for c in compats)
        lines.append(f"{label:<32}{cells}")
    lines.append(f"{'shell itself (bash -lc true)':<32}{pct(shell, .5) * 1000:>11.2f} /{pct(shell, .95) * 1000:>7.2f}"
                 f"  (in the sandbox, no farm process around it; the same for every setting)")
    if "farm-safe" in res:
        base = pct(res["farm-safe"]["whole"], .5)
        for compat in compats:
            if compat != "farm-safe":
                ratio = pct(res[compat]["whole"], .5) / base
                verdict = "within" if ratio <= 1.10 else "NOT within"
                lines.append(f"whole tool call {compat} / farm-safe: {ratio:.3f} ({verdict} 10 %)")
    return lines


def run_peer(python: str, calls: int) -> None:
    shared = Path(os.environ.get("FARM_SHARED_DIR") or ROOT.parent / "shared")
    shared = shared if shared.is_absolute() else ROOT / shared
    peer = shared / "bench" / "peer_miniswe.py"
    if not peer.exists():
        raise SystemExit(f"--peer-python: no peer anchor at {peer} (set FARM_SHARED_DIR)")
    print(f"\npeer: {python} {peer} --n {calls} --repeats 1", flush=True)
    done = subprocess.run([python, str(peer), "--n", str(calls), "--repeats", "1"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the peer run failed (exit {done.returncode}): {done.stderr[-1000:]}")
    print(done.stdout.split("=== SUMMARY", 1)[-1].split("\n--- repeat", 1)[0])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked; ``compats`` is the list of settings, ``rounds`` at most ``calls``.

    Raises:
        SystemExit: an unknown setting, fewer than one call, or an unknown backend (argparse's
            exit status 2 for the last).
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=300, help="tool calls per setting")
    ap.add_argument("--compat", default="farm-safe,leaf-2609", help="agent.compat settings, comma-separated")
    ap.add_argument("--rounds", type=int, default=5, help="rounds the settings take turns in")
    ap.add_argument("--mode", default="sequential", choices=["sequential", "concurrent"])
    ap.add_argument("--tokenizer", default="qwen", choices=["qwen", "tiktoken", "bytes"])
    ap.add_argument("--backend", default="local", choices=BACKENDS,
                    help="local: bubblewrap; docker: farm's container backend on podman (the podman tests' images)")
    ap.add_argument("--peer-python", help="a venv's Python with mini-swe-agent 2.4.6: run the peer anchor too")
    args = ap.parse_args(argv)
    compats = [c.strip() for c in args.compat.split(",") if c.strip()]
    bad = [c for c in compats if c not in CHOICES["agent.compat"]]
    if bad or not compats:
        raise SystemExit(f"--compat: {bad or args.compat!r} is not among {', '.join(CHOICES['agent.compat'])}")
    if args.calls < 1:
        raise SystemExit(f"--calls: {args.calls} (at least 1)")
    args.compats = compats
    args.rounds = max(1, min(args.rounds, args.calls))
    return args


def engine_of(backend: str) -> str:
    """What runs the sandbox, as its version says: bubblewrap's, or the container engine's."""
    if backend == "docker":
        from bench.container_backend import engine_version

        return engine_version()
    try:
        said = subprocess.run(["bwrap", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        said = ""
    return said or "bubblewrap"


def header(backend: str, engine: str, n: int, rounds: int, mode: str, tokenizer: str, load: float) -> list[str]:
    """The lines above the table: the backend and its engine first, then how it was run."""
    return [f"backend {backend}, engine {engine}",
            f"Bash true per tool call ({n} calls per setting in {rounds} rounds, {mode}, "
            f"tokenizer={tokenizer}, load {load:.1f})"]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    shell, res = asyncio.run(measure(args.calls, args.compats, args.rounds, args.mode, args.tokenizer, args.backend))
    n = len(next(iter(res.values()))["whole"])
    print("\n".join(header(args.backend, engine_of(args.backend), n, args.rounds, args.mode, args.tokenizer,
                           os.getloadavg()[0])))
    print("\n".join(table(shell, res)))
    if args.peer_python:  # after farm's rounds, in the same command, whatever the backend
        run_peer(args.peer_python, args.calls)


if __name__ == "__main__":
    main()
