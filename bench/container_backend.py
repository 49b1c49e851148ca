"""sandbox=docker for the benchmarks: farm's ContainerSandbox on podman, on the podman tests' images.

``--backend docker`` of bench/harness_overhead.py and bench/sandbox_roundtrip.py runs through
here. The images are the ones tests/sandbox/docker uses (tests/support/podman.py): a bare Debian
bookworm root (debootstrap from deb.debian.org, imported into podman; no Python of its own) as
the task image, and farm's toolbox image (infra/k8s/toolbox) built on it. They are made the
first time and found afterwards, so a benchmark and the podman tests share one copy, and nothing
is pulled from an image registry (this machine reaches none). The sandbox itself gets its image
through farm's own image code (``ContainerSandbox._ensure_image``: present, ``pull=never``), as
a run's sandbox would.

A start's phases are read without touching farm's start sequence: the step names the sandbox
already announces (``SandboxStats.on_step``, what a run's progress line listens to), the moment
the agent's first ``ping`` was answered (the start's next step, ``_prepare``, begins), and the
engine's own event log for when the task container was created and started.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import AsyncIterator

from farm.config import DockerSandboxConfig
from farm.sandbox.docker.sandbox import ContainerSandbox
from farm.sandbox.images.engine import run_engine
from farm.tasks.model import Environment, Task, VerifierSpec

# the podman tests' tags, so that neither builds what the other already has
from tests.support.podman import BASE_IMAGE, TOOLBOX_IMAGE, prepare_podman

ENGINE = "podman"  # what tests/support/podman.py prepares: podman as root, runc
RUN_ID = "bench"  # the containers' run label: `farm gc` removes what a killed benchmark left

# the rows of a start, in order (ms); each is the time between two marks of start_phases
PHASES = (
    "image present (inspect) + pod spec",
    "toolbox volume (shared, or filled)",
    "container create (run -d to created)",
    "container start (created to started)",
    "run -d returns + cgroup lookup",
    "agent answers its first ping",
    "log dirs (one exec)",
)


def prepare() -> DockerSandboxConfig:
    """Make the base and toolbox images present (built once, then found) and point podman at the
    tests' containers.conf; the sandbox settings to start containers on them.

    Raises:
        SystemExit: the machine cannot (not root, no podman, no debootstrap, no Debian mirror).
    """
    import pytest

    try:
        prepare_podman()  # sets CONTAINERS_CONF in this process: every engine call reads it
    except pytest.skip.Exception as e:
        raise SystemExit(f"--backend docker: {e.msg}") from None
    return DockerSandboxConfig(engine=ENGINE, toolbox_image=TOOLBOX_IMAGE, pull="never")


def engine_version(binary: str = ENGINE) -> str:
    """What ``<binary> --version`` says ("podman version 4.3.1"), for the table's header."""
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        return f"{binary} (no version: {e})"
    return done.stdout.strip() or binary


def docker_task(task_id: str) -> Task:
    """A task on the bare Debian image; no network, so the start creates no network namespace
    with a bridge (what the podman tests' tasks do too)."""
    return Task(benchmark="bench", task_id=task_id, instruction="bench",
                environment=Environment(image=BASE_IMAGE, workdir="/app", build_steps=()),
                verifier=VerifierSpec(), agent_timeout_s=3600, agent_network="no-network",
                verifier_network="no-network")


class TimedContainerSandbox(ContainerSandbox):
    """A ContainerSandbox that keeps the wall time of each step its start announces.

    ``marks`` holds (step, time.time()) pairs: the steps ``on_step`` hears, then ``pong`` when
    the sandbox agent's first ping has been answered (``_prepare`` is what start() does next)."""

    def __init__(self, task: Task, cfg: DockerSandboxConfig) -> None:
        super().__init__(task, cfg, run_id=RUN_ID, trial_key=uuid.uuid4().hex, network=task.agent_network)
        self.marks: list[tuple[str, float]] = []
        self.stats.on_step = lambda step: self.marks.append((step, time.time()))

    async def _prepare(self) -> None:
        self.marks.append(("pong", time.time()))
        await super()._prepare()


@contextlib.asynccontextmanager
async def started(task: Task, cfg: DockerSandboxConfig) -> AsyncIterator[TimedContainerSandbox]:
    """A started container sandbox, removed on the way out (also after a failure)."""
    sb = TimedContainerSandbox(task, cfg)
    await sb.start()
    try:
        yield sb
    finally:
        await sb.close()


async def container_events(binary: str, name: str, since: float) -> dict[str, float]:
    """When the engine created, initialised and started the container ``name`` (wall seconds,
    from its event log; podman's ``--format`` names the fields); {} where it keeps none."""
    rc, out, _ = await run_engine(binary, "events", "--stream=false", "--since", f"{since:.3f}",
                                  "--filter", f"container={name}", "--format", "{{.Status}} {{.Time.UnixNano}}",
                                  timeout=60)
    return parse_events(out) if rc == 0 else {}


def parse_events(out: str) -> dict[str, float]:
    """``status unix-ns`` lines -> {status: seconds}; the first of each status counts."""
    seen: dict[str, float] = {}
    for line in out.splitlines():
        status, _, ns = line.strip().partition(" ")
        if ns.strip().isdigit():
            seen.setdefault(status, int(ns) / 1e9)
    return seen


def start_phases(marks: list[tuple[str, float]], events: dict[str, float], t0: float, t1: float,
                 label: str = ENGINE) -> dict[str, float]:
    """One start's phases in ms (keys: PHASES, then ``whole``) from the sandbox's marks, the
    engine's events and the start's own begin ``t0`` and end ``t1`` (wall seconds). A phase whose
    marks are missing (an engine without an event log) is left out rather than guessed."""
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for step, at in marks:
        first.setdefault(step, at)
        last[step] = at
    # start() announces "<engine> create" itself and _create again for the volume and the toolbox
    # container: the first one ends the image check, the last one begins the volume
    points = [first.get(f"{label} image", t0), first.get(f"{label} create"), last.get(f"{label} create"),
              first.get(f"{label} run"), events.get("create"), events.get("start"), first.get("agent ping"),
              first.get("pong"), t1]
    spans = [(0, 1), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8)]
    out: dict[str, float] = {}
    for name, (a, b) in zip(PHASES, spans):
        if points[a] is not None and points[b] is not None:
            out[name] = (points[b] - points[a]) * 1000
    out["whole"] = (t1 - t0) * 1000
    return out


async def timed_start(task: Task, cfg: DockerSandboxConfig) -> tuple[TimedContainerSandbox, dict[str, float]]:
    """Start one sandbox; it and its start's phases (ms). The caller closes it."""
    sb = TimedContainerSandbox(task, cfg)
    t0 = time.time()
    await sb.start()
    t1 = time.time()
    events = await container_events(cfg.engine, sb.name, t0 - 1)
    return sb, start_phases(sb.marks, events, t0, t1, sb.step_label)
