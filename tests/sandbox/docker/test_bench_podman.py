"""``--backend docker`` of the benchmarks, for real: bench/harness_overhead.py runs the agent loop's
`Bash true` calls in one ContainerSandbox on podman, bench/sandbox_roundtrip.py splits a start into
its phases. A handful of calls and one start each, on the images the other podman tests already
use (the ``podman_env`` fixture makes them once); the numbers are not checked, the tables are."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.container_backend import PHASES, RUN_ID
from farm.sandbox.relayed.manifests import RUN_LABEL
from tests.support.podman import run_command

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
NUMBER = r"-?\d+\.\d+"


def _bench(env: dict[str, str], name: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / name), *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    return done.stdout


def _left_behind() -> list[str]:
    """Containers of the benchmarks' run label still present."""
    out = run_command("podman", "ps", "-a", "--filter", f"label={RUN_LABEL}={RUN_ID}", "--format", "{{.Names}}")
    return out.stdout.split()


def test_harness_overhead_on_docker_prints_the_local_tables_rows(podman_env: dict[str, str]) -> None:
    before = _left_behind()
    out = _bench(podman_env, "harness_overhead.py", "--backend", "docker", "--calls", "4", "--rounds", "1",
                 "--tokenizer", "bytes")
    lines = out.splitlines()
    assert re.fullmatch(r"backend docker, engine podman version \S+", lines[0]), out
    assert lines[1].startswith("Bash true per tool call (4 calls per setting in 1 rounds, sequential"), out
    assert lines[2].split()[-2:] == ["farm-safe", "leaf-2609"], out
    rows = ("whole tool call", "harness (all but the shell)", "  processes around the shell", "  channel + tools",
            "  loop bookkeeping", "llm round trip (instant)", "shell itself (bash -lc true)")
    for label, line in zip(rows, lines[3:10], strict=True):
        assert line.startswith(label), out
        cells = re.findall(NUMBER, line[32:])
        assert len(cells) == (2 if label.startswith("shell") else 4), line
    assert re.fullmatch(rf"whole tool call leaf-2609 / farm-safe: {NUMBER} \((NOT )?within 10 %\)", lines[10]), out
    assert _left_behind() == before  # the sandbox removed its container


def test_sandbox_roundtrip_on_docker_splits_a_start_into_its_phases(podman_env: dict[str, str]) -> None:
    out = _bench(podman_env, "sandbox_roundtrip.py", "--backend", "docker", "--starts", "1", "--execs", "3")
    lines = out.splitlines()
    assert re.fullmatch(r"backend docker, engine podman version \S+", lines[0]), out
    by_name = {line[:38].rstrip(): line[38:].split() for line in lines[3:]}
    names = ["sandbox start from a cached image", *(f"  {p}" for p in PHASES), "sandbox close",
             "exec `true` round trip", "call ping round trip"]
    assert list(by_name) == names, out
    for name in names:  # every phase measured: podman keeps an event log here (containers.conf: file)
        n, p50, p95, mean = by_name[name]
        assert n == ("3" if "round trip" in name else "1") and float(p50) >= 0, out
    whole = float(by_name["sandbox start from a cached image"][1])
    # the phases tile the start from the image check to its end
    assert sum(float(by_name[f"  {p}"][1]) for p in PHASES) == pytest.approx(whole, abs=max(5.0, whole * 0.02)), out
