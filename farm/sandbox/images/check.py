"""`farm images check`: can every selected task's image be had, without pulling or building?

For each task it works out what a ``sandbox=docker`` start would do under
``sandbox.image_policy`` and ``sandbox.docker.*`` (:func:`farm.sandbox.images.engine.plan_image`, after
the registry mirror and the digest lock) and asks only read-only questions:

* a pull: is the reference present in the engine's storage (its id and repo digest), else does
  the registry have it (``skopeo inspect`` when installed, else ``<engine> manifest inspect``;
  ``--offline`` skips the question and says "not checked");
* a build: the content-hashed tag and whether it is already built, the Dockerfile's external
  FROM images (present, stand-in per ``io.farm.standin``, or in the registry), and the
  instructions it uses.

A task cannot resolve when neither way can give its image: the named image is absent and
cannot be pulled, and no build is planned or the build's base is absent under
``sandbox.docker.pull=never``. Nothing is ever pulled or built here.

With ``lock`` every task's image must also resolve to a digest (the registry's manifest digest,
or the local image's repo digest), and the digests are written as an image lock (the format of
``farm/tasks/image_locks/``) that ``sandbox.kubernetes.image_lock`` / ``sandbox.docker.image_lock``
then pins a run to; a task without a digest (a local build never pushed, a registry that was not
asked) fails the check by name, before any LLM spend.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from farm.config import DockerSandboxConfig, FarmConfig
from farm.errors import ConfigError, FarmError
from farm.sandbox.images.engine import STANDIN_LABEL, run_engine
from farm.sandbox.images.plan import dockerfile_of, local_build_tag, plan_image
from farm.sandbox.images.resolve import resolve_image
from farm.tasks.dockerfile import instructions as dockerfile_instructions
from farm.tasks.dockerfile import parse_cached
from farm.tasks.model import Task

REGISTRY_TIMEOUT_S = 30.0
EXIT_UNRESOLVABLE = 1

# what is known about one image reference
PRESENT, IN_REGISTRY, NOT_CHECKED, ABSENT, UNREACHABLE = "present", "in registry", "not checked", "absent", \
    "not in registry"
# a SWE-bench (or Pro) instance image farm builds a stand-in of when absent (farm/sandbox/images/swebench{,_pro}/)
STANDIN_BUILD = "stand-in built on start"


@dataclass
class ImageState:
    ref: str
    state: str  # present | in registry | not checked | absent (pull=never) | not in registry
    image_id: str = ""  # local image id (present)
    digest: str = ""  # repo digest: local RepoDigests, or the registry's manifest digest
    standin: bool = False
    detail: str = ""  # why a registry query failed

    @property
    def usable(self) -> bool:
        """A start could have this image (``not checked`` is given the benefit of the doubt)."""
        return self.state in (PRESENT, IN_REGISTRY, NOT_CHECKED, STANDIN_BUILD)

    def describe(self) -> str:
        what = self.state + (" (stand-in)" if self.standin else "")
        ident = (self.digest or self.image_id)[:19]
        return f"{self.ref}: {what}" + (f" {ident}" if ident else "")


@dataclass
class CheckRow:
    task: str  # <benchmark>/<task_id>
    plan: str  # pull | build | pull, else build | error
    named: ImageState | None = None  # the image a pull would run
    tag: str | None = None  # the content-hashed build tag
    cached: bool = False  # the tag is already built
    bases: list[ImageState] = field(default_factory=list)  # the build's external FROM images
    instructions: list[str] = field(default_factory=list)  # Dockerfile keywords, in first-use order
    ok: bool = True
    why: str = ""  # why the task cannot resolve

    @property
    def status(self) -> str:
        if not self.ok:
            return "unresolvable"
        if self.named is not None and self.named.state in (PRESENT, IN_REGISTRY, NOT_CHECKED):
            return "pull: " + self.named.state
        if self.cached:
            return "build: cached"
        return "build: to build" if self.tag else "ok"


def _parse_inspect(out: str) -> tuple[str, str, bool]:
    """(id, first repo digest, stand-in) from ``image inspect`` JSON."""
    data = json.loads(out)
    data = data[0] if isinstance(data, list) else data
    config = data.get("Config") or {}
    labels = {**(data.get("Labels") or {}), **(config.get("Labels") or {})}
    digests = data.get("RepoDigests") or []
    return (str(data.get("Id", "")), str(digests[0]).rpartition("@")[2] if digests else "",
            str(labels.get(STANDIN_LABEL, "")).lower() == "true")


async def _registry_digest(binary: str, ref: str) -> tuple[bool, str, str]:
    """(the registry has it, its digest if known, error) — a read of the manifest, never a pull."""
    skopeo = shutil.which("skopeo")
    if skopeo is not None:
        rc, out, err = await run_engine(skopeo, "inspect", "--no-tags", f"docker://{ref}", timeout=REGISTRY_TIMEOUT_S)
        if rc == 0:
            try:
                return True, str(json.loads(out).get("Digest", "")), ""
            except ValueError:
                return True, "", ""
        return False, "", err.strip()[-300:]
    rc, _, err = await run_engine(binary, "manifest", "inspect", ref, timeout=REGISTRY_TIMEOUT_S)
    return rc == 0, "", "" if rc == 0 else err.strip()[-300:]


async def image_state(binary: str, ref: str, *, pull: str, registry: bool) -> ImageState:
    """What the engine (and, unless ``registry`` is false, the registry) knows of ``ref``."""
    if pull != "always":
        rc, out, _ = await run_engine(binary, "image", "inspect", ref, timeout=60)
        if rc == 0:
            image_id, digest, standin = _parse_inspect(out)
            return ImageState(ref, PRESENT, image_id, digest, standin)
    if pull == "never":
        return ImageState(ref, ABSENT, detail="not present and sandbox.docker.pull=never")
    if not registry:
        return ImageState(ref, NOT_CHECKED)
    found, digest, err = await _registry_digest(binary, ref)
    return ImageState(ref, IN_REGISTRY, digest=digest) if found else ImageState(ref, UNREACHABLE, detail=err)


async def check_task(binary: str, task: Task, cfg: DockerSandboxConfig, policy: str, *,
                     registry: bool = True) -> CheckRow:
    """The check of one task, as a ``sandbox=docker`` start with this config would get its image.

    Raises:
        ConfigError: an unknown policy.
    """
    row = CheckRow(f"{task.benchmark}/{task.task_id}", "error")
    plan = plan_image(task, policy)
    row.plan = plan.describe.split(" ", 1)[0] if not (plan.pull_first and plan.build) else "pull, else build"
    if plan.pull_first:
        try:
            named = resolve_image(task, cfg, "docker")  # the mirror and the digest lock, as a start applies them
        except FarmError as exc:
            named = None
            row.why = str(exc)
        if named is not None:
            row.named = await image_state(binary, named, pull=cfg.pull, registry=registry)
            if row.named.usable:
                if plan.build:
                    row.tag = await local_build_tag(binary, task)
                return row
            row.why = f"image {named}: {row.named.state}" + (f" ({row.named.detail})" if row.named.detail else "")
    if not plan.build:
        row.ok = False
        return row
    dockerfile = dockerfile_of(task)
    assert dockerfile is not None  # plan_image builds only a task with a Dockerfile
    row.tag = await local_build_tag(binary, task)  # the tag a start builds: its bases as present now
    assert row.tag is not None
    rc, _, _ = await run_engine(binary, "image", "inspect", row.tag, timeout=60)
    row.cached = rc == 0
    try:
        parsed = parse_cached(dockerfile)
        row.instructions = list(dict.fromkeys(
            i.keyword for i in dockerfile_instructions(dockerfile.read_text(encoding="utf-8"), dockerfile)))
    except (FarmError, OSError, UnicodeDecodeError) as exc:
        row.ok, row.why = row.cached, f"Dockerfile {dockerfile}: {exc}"
        return row
    # a base the build reads is pulled by the build itself unless pull=never (`--pull=never`)
    base_pull = "never" if cfg.pull == "never" else "missing"
    row.bases = list(await asyncio.gather(*(image_state(binary, b, pull=base_pull, registry=registry)
                                            for b in parsed.base_images)))
    swebench_base = _swebench_base(task)
    row.bases = [ImageState(b.ref, STANDIN_BUILD, standin=True) if not b.usable and _same_ref(b.ref, swebench_base)
                 else b for b in row.bases]
    missing = [b for b in row.bases if not b.usable]
    if missing and not row.cached:
        row.ok = False
        why = "; ".join(f"base {b.ref}: {b.state}" + (f" ({b.detail})" if b.detail else "") for b in missing)
        row.why = f"{row.why}; build: {why}" if row.why else f"build: {why}"
    else:
        row.why = ""  # the build gives the image even though the named one is unavailable
    return row


def _swebench_base(task: Task) -> str | None:
    """The SWE-bench (or SWE-bench Pro) instance image the task's build starts FROM, when farm can
    build its stand-in."""
    if not task.metadata.get("swebench_repos"):
        return None
    row = task.metadata.get("swebench")
    if isinstance(row, dict):
        from farm.tasks.swebench.spec import instance_image

        return instance_image(row)
    row = task.metadata.get("swebench_pro")
    if isinstance(row, dict) and task.metadata.get("swebench_pro_scripts"):
        from farm.tasks.swebench_pro.rows import image_tag

        return image_tag(row)
    return None


def _same_ref(ref: str, other: str | None) -> bool:
    return other is not None and ref.removeprefix("docker.io/") == other.removeprefix("docker.io/")


async def check_tasks(binary: str, tasks: list[Task], cfg: DockerSandboxConfig, policy: str, *,
                      registry: bool = True, jobs: int = 4) -> list[CheckRow]:
    """:func:`check_task` for every task, ``jobs`` at a time, in the tasks' order."""
    if tasks:
        plan_image(tasks[0], policy)  # an unknown policy fails once, before any engine call
    sem = asyncio.Semaphore(jobs)

    async def one(task: Task) -> CheckRow:
        async with sem:
            return await check_task(binary, task, cfg, policy, registry=registry)

    return list(await asyncio.gather(*(one(t) for t in tasks)))


_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def lock_entries(rows: list[CheckRow], tasks: list[Task]) -> tuple[list[dict[str, str]], list[str]]:
    """(the lock's ``images`` entries, ``"<task>: why"`` for each task without a digest)."""
    entries, missing = [], []
    for task, row in zip(tasks, rows, strict=True):
        digest = row.named.digest if row.named is not None and row.named.usable else ""
        if _DIGEST.match(digest):
            entries.append({"task_id": task.task_id, "digest": digest})
            continue
        if not row.ok:
            why = row.why or "unresolvable"
        elif row.named is not None and row.named.state == NOT_CHECKED:
            why = f"{row.named.ref}: registry not asked (--offline)"
        elif row.named is None or not row.named.usable:
            why = f"only a local build ({row.tag}): push it (farm images build --push) and lock the pushed image"
        else:
            why = f"{row.named.ref}: {row.named.state}, no repo digest"
        missing.append(f"{row.task}: {why}")
    return entries, missing


def write_lock(path: Path, entries: list[dict[str, str]], benchmark: str) -> None:
    ids = [e["task_id"] for e in entries]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise ConfigError(f"--lock {str(path)!r}: task ids {dup} repeat across benchmarks; "
                          "lock one benchmark at a time")
    payload = {"benchmark": benchmark, "images": sorted(entries, key=lambda e: e["task_id"])}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)  # a reader never sees half a lock


def check_images(cfg: FarmConfig, *, offline: bool, jobs: int, out: Console, err: Console,
                 lock: str | None = None) -> int:
    """Check every selected task's image; print a table and why each failing task cannot resolve;
    1 when any cannot. With ``lock``, also write the digests as an image lock, or (1) name every
    task that has no digest and write nothing.

    Raises:
        ConfigError: a bad ``--jobs`` value, an unknown policy, or the engine is not on PATH.
    """
    from farm.tasks.benchmark import load_benchmark_report
    from farm.tasks.cli import print_report

    if jobs < 1:
        raise ConfigError(f"invalid value {jobs!r} for '--jobs': must be >= 1")
    binary = cfg.sandbox.docker.engine
    if shutil.which(binary) is None:
        raise ConfigError(f"invalid value {binary!r} for 'sandbox.docker.engine': not on PATH")
    loaded = load_benchmark_report(cfg.benchmark)
    rows = asyncio.run(check_tasks(binary, loaded.tasks, cfg.sandbox.docker, cfg.sandbox.image_policy,
                                   registry=not offline, jobs=jobs))
    table = Table(title=f"task images ({len(rows)} tasks, engine {binary}, image_policy "
                        f"{cfg.sandbox.image_policy}, pull {cfg.sandbox.docker.pull})")
    for col in ("task", "plan", "status", "image", "id / digest", "build bases", "instructions"):
        table.add_column(col, overflow="fold")
    for r in rows:
        named = r.named
        ident = (named.digest or named.image_id[:19]) if named is not None else ""
        image = named.ref if named is not None and (named.usable or not r.tag) else (r.tag or "-")
        if r.tag and r.cached and (named is None or not named.usable):
            image += " (built)"
        table.add_row(r.task, r.plan, r.status, image, ident or "-",
                      "\n".join(b.describe() for b in r.bases) or "-", " ".join(r.instructions) or "-")
    out.print(table)
    bad = [r for r in rows if not r.ok]
    for r in bad:
        err.print(f"unresolvable {r.task}: {r.why}", highlight=False, markup=False, soft_wrap=True)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    out.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no tasks",
              highlight=False, markup=False)
    print_report(loaded.report, err)
    if lock is not None:
        entries, missing = lock_entries(rows, loaded.tasks)
        for line in missing:
            err.print(f"no digest for {line}", highlight=False, markup=False, soft_wrap=True)
        if missing or not entries:
            err.print(f"lock not written: {len(missing)} of {len(rows)} tasks have no digest", highlight=False,
                      markup=False)
            return EXIT_UNRESOLVABLE
        write_lock(Path(lock), entries, cfg.benchmark.name)
        out.print(f"wrote {lock}: {len(entries)} digests (sandbox.kubernetes.image_lock={lock})",
                  highlight=False, markup=False)
    return EXIT_UNRESOLVABLE if bad else 0
