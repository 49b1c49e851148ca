"""`farm images build [--push REGISTRY] [--jobs N]` and `farm images prune [--all]`.

``build`` builds every selected task's Dockerfile; ``prune`` removes their stale builds
(farm/sandbox/images/cache.py).

The same content-hashed builds a ``sandbox=docker`` run makes on demand (farm/sandbox/images/ensure.py),
made ahead of time with ``sandbox.docker.engine``; with ``--push`` each is also tagged
``REGISTRY/farm-task/<benchmark>-<task>:<hash of the task's files>`` and pushed, which is the
reference a Kubernetes run with ``sandbox.kubernetes.build_registry=REGISTRY`` uses (that hash
leaves out the base images' ids, which a cluster cannot see: each push replaces what it serves).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from farm.config import FarmConfig
from farm.errors import ConfigError
from farm.sandbox.base import SandboxStartError
from farm.sandbox.images.engine import run_engine
from farm.sandbox.images.ensure import build_bases, build_image
from farm.sandbox.images.plan import dockerfile_of, local_build_tag, registry_prefix, task_build_tag
from farm.tasks.model import Task

EXIT_BUILD_FAILED = 1


@dataclass
class BuildRow:
    task: str
    tag: str
    status: str  # built | cached | failed | pushed-failed | no Dockerfile
    seconds: float
    detail: str = ""


async def _one(binary: str, task: Task, *, pull: str, registry: str | None, sem: asyncio.Semaphore,
               min_free_gb: float | None = None) -> BuildRow:
    name = f"{task.benchmark}/{task.task_id}"
    dockerfile = dockerfile_of(task)
    if dockerfile is None:
        return BuildRow(name, "-", "no Dockerfile", 0.0)
    async with sem:
        t0 = time.monotonic()
        try:
            await build_bases(binary, task, "build", pull)  # a SWE-bench instance stand-in, where needed
            got = await build_image(binary, task, pull=pull, min_free_gb=min_free_gb)
        except SandboxStartError as e:
            lines = [x for x in str(e).splitlines() if x.strip()]
            first = lines[0].removesuffix("; log tail:") + (f" ... {lines[-1].strip()}" if len(lines) > 1 else "")
            return BuildRow(name, await local_build_tag(binary, task) or "-", "failed", time.monotonic() - t0, first)
        row = BuildRow(name, got.ref, got.provenance.source, time.monotonic() - t0)
        if registry:
            # keyed by the task's files alone: the tag a cluster computes without this engine
            remote = task_build_tag(task, registry)
            assert remote is not None  # the task has a Dockerfile
            for args in (("tag", got.ref, remote), ("push", remote)):
                rc, _, err = await run_engine(binary, *args, timeout=3600)
                if rc != 0:
                    row.status, row.detail = "failed", f"{args[0]} {remote}: {err.strip()[-300:]}"
                    break
            else:
                row.tag, row.status = remote, f"{row.status}+pushed"
            row.seconds = time.monotonic() - t0
        return row


def _engine(cfg: FarmConfig) -> str:
    binary = cfg.sandbox.docker.engine
    if shutil.which(binary) is None:
        raise ConfigError(f"invalid value {binary!r} for 'sandbox.docker.engine': not on PATH")
    return binary


def prune_images(cfg: FarmConfig, *, everything: bool, out: Console, err: Console) -> int:
    """Remove the selected tasks' stale builds (all of their builds with ``everything``); print them.

    Raises:
        ConfigError: the engine is not on PATH.
    """
    from farm.sandbox.images.cache import prune
    from farm.tasks.benchmark import load_benchmark_report
    from farm.tasks.cli import print_report

    binary = _engine(cfg)
    loaded = load_benchmark_report(cfg.benchmark)
    removed = asyncio.run(prune(binary, loaded.tasks, everything=everything))
    for image in removed:
        out.print(f"removed {image.task} {', '.join(image.refs) or image.image_id[:12]}", highlight=False, markup=False)
    what = "builds" if everything else "stale builds"
    out.print(f"{len(removed)} {what} removed ({sum(i.size for i in removed) / 1e9:.1f} GB as the engine counts, "
              f"shared layers included) for {len(loaded.tasks)} selected tasks")
    print_report(loaded.report, err)
    return 0


def build_images(cfg: FarmConfig, *, push: str | None, jobs: int, out: Console, err: Console) -> int:
    """Build (and push) every selected task's image; print a table; 1 when any build failed.

    Raises:
        ConfigError: a bad ``--push`` or ``--jobs`` value, or the engine is not on PATH.
    """
    from farm.tasks.benchmark import load_benchmark_report
    from farm.tasks.cli import print_report

    if jobs < 1:
        raise ConfigError(f"invalid value {jobs!r} for '--jobs': must be >= 1")
    registry = registry_prefix(push, "--push") if push is not None else None
    binary = _engine(cfg)
    loaded = load_benchmark_report(cfg.benchmark)

    async def main() -> list[BuildRow]:
        sem = asyncio.Semaphore(jobs)
        return list(await asyncio.gather(*(_one(binary, t, pull=cfg.sandbox.docker.pull, registry=registry, sem=sem,
                                                min_free_gb=cfg.sandbox.docker.image_min_free_gb)
                                           for t in loaded.tasks)))

    rows = asyncio.run(main())
    table = Table(title=f"task images ({len(rows)} tasks, engine {binary})")
    for col in ("task", "tag", "status", "seconds"):
        table.add_column(col, no_wrap=True, justify="right" if col == "seconds" else "left")
    for r in rows:
        table.add_row(r.task, r.tag, r.status, f"{r.seconds:.1f}")
    out.print(table)
    failed = [r for r in rows if r.status == "failed"]
    for r in failed:
        err.print(f"failed {r.task}: {r.detail}", highlight=False, markup=False, soft_wrap=True)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    out.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    print_report(loaded.report, err)
    return EXIT_BUILD_FAILED if failed else 0


def prepull_images(cfg: FarmConfig, *, next_n: int, out: Console, err: Console) -> int:
    """Print the pre-pull DaemonSet (farm/sandbox/kubernetes/prepull.py) for the first ``next_n`` distinct
    images of the selected tasks, in plan order and as a Kubernetes trial would reference them
    (mirror and digest lock applied); ``kubectl apply -f -`` takes the output.

    Raises:
        ConfigError: a bad ``--next``, or a task whose image cannot be referenced (no image, not
            in the digest lock).
    """
    import yaml

    from farm.sandbox.images.resolve import resolve_image
    from farm.sandbox.kubernetes.prepull import next_images, prepull_daemonset
    from farm.tasks.benchmark import load_benchmark_report
    from farm.tasks.cli import print_report

    if next_n < 1:
        raise ConfigError(f"invalid value {next_n!r} for '--next': must be >= 1")
    loaded = load_benchmark_report(cfg.benchmark)
    section = cfg.sandbox.kubernetes
    refs = [resolve_image(t, section, "kubernetes") for t in loaded.tasks if t.environment.image is not None]
    if not refs:
        raise ConfigError(f"benchmark {cfg.benchmark.name!r}: no selected task names an image to pre-pull")
    images = next_images(refs, next_n)
    out.print(yaml.safe_dump(prepull_daemonset(images, section), sort_keys=False), end="", highlight=False,
              markup=False, soft_wrap=True)
    err.print(f"# {len(images)} of {len(set(refs))} distinct images; delete the DaemonSet when the run is done",
              highlight=False, markup=False)
    print_report(loaded.report, err)
    return 0
