"""Getting the task's image into the engine's local storage: present, pulled, or built.

:func:`ensure_image` follows the plan (:func:`farm.sandbox.images.plan.plan_image`); a build
(:func:`build_image`) runs under the content-hashed tag, so an existing tag is the same build
and is reused; two trials of one task never build it twice at once (a cross-process lock per
tag). A failed pull is remembered per image and a failed build per tag for the life of the
process, so a run does not wait on an unreachable registry or repeat a broken build for every
trial.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from farm.sandbox.base import ImageProvenance, SandboxStartError
from farm.sandbox.images import cache
from farm.sandbox.images.engine import DIGEST_LABEL, TASK_LABEL, engine_kind, pull_flag, run_engine
from farm.sandbox.images.local import _lock_dir, failing_step, inspect_image, tag_lock
from farm.sandbox.images.plan import (
    ImageFacts,
    base_identities,
    build_context,
    build_digest,
    dockerfile_of,
    plan_image,
    sanitise,
    task_tag,
)
from farm.sandbox.pipefail import strict_dockerfile
from farm.tasks.model import Task

if TYPE_CHECKING:
    from farm.sandbox.images.swebench.build import BuiltInstance

LOG_ARTIFACT = "image-build.log"

# failures remembered for this process: image -> why the pull failed; tag -> the build error
_failed_pulls: dict[str, str] = {}
_failed_builds: dict[str, str] = {}


@dataclass
class EnsuredImage:
    ref: str  # what the container runs
    facts: ImageFacts
    provenance: ImageProvenance
    replay: bool  # the build steps still have to be replayed on the running container
    log: bytes = b""  # the build log, when this attempt built it


async def ensure_image(binary: str, task: Task, policy: str, named: str | None, *, pull: str = "missing",
                       lock_dir: Path | None = None, scope: str | None = None,
                       min_free_gb: float | None = None, on_step: Callable[[str], None] | None = None) -> EnsuredImage:
    """Make the task's image present in the engine's local storage, following ``policy``.

    ``pull`` is ``sandbox.docker.pull``: ``never`` neither pulls nor lets a build pull its base
    (``--pull=never``); ``always`` pulls the named image even when present. ``scope`` and
    ``min_free_gb``: see :func:`build_image`. ``on_step`` hears which engine step runs now
    (``podman pull``, ``podman build``): a start that stalls in one says which.

    Raises:
        SandboxStartError: ``image_pull`` (the named image is not present and cannot be pulled,
            and the policy does not build), ``image_build`` (the build failed or timed out).
    """
    plan = plan_image(task, policy, named)
    step = on_step or (lambda _: None)
    label = Path(binary).name
    if plan.build and (task.metadata.get("swebench") or task.metadata.get("swebench_pro_scripts")):
        step(f"{label} build (instance base)")
    base_log = await build_bases(binary, task, policy, pull, lock_dir) if plan.build else ""
    pull_error = ""
    if plan.pull_first and plan.named:
        step(f"{label} pull")
        got = await _present_or_pulled(binary, plan.named, pull, remember=plan.build)
        if isinstance(got, EnsuredImage):
            got.replay = plan.replay
            return got
        pull_error = got
        if not plan.build:
            raise SandboxStartError(f"image {plan.named}: {pull_error}", reason="image_pull")
    step(f"{label} build")
    built = await build_image(binary, task, pull=pull, lock_dir=lock_dir, after=pull_error, scope=scope,
                              min_free_gb=min_free_gb)
    if base_log:
        built.log = base_log.encode() + built.log
    return built


async def build_bases(binary: str, task: Task, policy: str = "build", pull: str = "missing",
                      lock_dir: Path | None = None) -> str:
    """Make present the base images farm itself knows how to build for ``task`` (the SWE-bench or
    SWE-bench Pro instance image its Dockerfile starts FROM); the build log of what was built now, else "".

    Raises:
        SandboxStartError: ``image_build`` when such a base cannot be had.
    """
    if task.metadata.get("swebench"):
        return await _swebench_base(binary, task, policy, pull, lock_dir)
    if task.metadata.get("swebench_pro") and task.metadata.get("swebench_pro_scripts"):
        return await _swebench_pro_base(binary, task, policy, pull, lock_dir)
    return ""


async def _swebench_base(binary: str, task: Task, policy: str, pull: str, lock_dir: Path | None) -> str:
    """Make the SWE-bench instance image the task's Dockerfile starts FROM present: the published
    one when it is here or pulls (``pull-or-build``), else a stand-in built from the swebench
    package's scripts (farm/sandbox/images/swebench/). Returns the stand-in's build log, if built now.

    Raises:
        SandboxStartError: ``image_build`` when the stand-in cannot be built (its cause named).
    """
    from farm.sandbox.images.swebench.build import ensure_instance
    from farm.sandbox.images.swebench.recipe import RECIPE_LABEL
    from farm.tasks.swebench.spec import instance_image

    row = dict(task.metadata["swebench"])  # type: ignore[call-overload]

    def build() -> Awaitable[BuiltInstance]:
        return ensure_instance(binary, row, task.metadata.get("swebench_repos"),  # type: ignore[arg-type]
                               pythons=task.metadata.get("swebench_pythons"),  # type: ignore[arg-type]
                               timeout=task.environment.build_timeout_s * 2, lock_dir=lock_dir)
    return await _standin_base(binary, "docker.io/" + instance_image(row), RECIPE_LABEL, build, policy, pull)


async def _swebench_pro_base(binary: str, task: Task, policy: str, pull: str, lock_dir: Path | None) -> str:
    """The same for a SWE-bench Pro instance image (``jefzda/sweap-images:<tag>``): the published one
    when here or pulled, else a stand-in from the instance's own Dockerfiles (farm/sandbox/images/swebench_pro/)."""
    from farm.sandbox.images.swebench_pro.build import ensure_pro_instance, pro_image
    from farm.sandbox.images.swebench_pro.recipe import RECIPE_LABEL

    row = dict(task.metadata["swebench_pro"])  # type: ignore[call-overload]

    def build() -> Awaitable[BuiltInstance]:
        return ensure_pro_instance(binary, row, task.metadata.get("swebench_repos"),  # type: ignore[arg-type]
                                   task.metadata.get("swebench_pro_scripts"),  # type: ignore[arg-type]
                                   pythons=task.metadata.get("swebench_pythons"),  # type: ignore[arg-type]
                                   timeout=task.environment.build_timeout_s * 2, lock_dir=lock_dir)
    return await _standin_base(binary, pro_image(row), RECIPE_LABEL, build, policy, pull)


async def _standin_base(binary: str, ref: str, recipe_label: str, build: Callable[[], Awaitable[BuiltInstance]],
                        policy: str, pull: str) -> str:
    present = await inspect_image(binary, ref)
    if present is not None and recipe_label not in present.labels:
        return ""  # the published image (or one the user provides): used as it is
    # absent, or farm's own stand-in: the builder rebuilds it when its recipe changed (the row's
    # base commit, the scripts, the environment), never reusing a stale one
    if policy == "pull-or-build" and present is None:
        got = await _present_or_pulled(binary, ref, pull, remember=True)
        if isinstance(got, EnsuredImage):
            return ""
    if ref in _failed_builds:
        raise SandboxStartError(_failed_builds[ref] + "\n(failed earlier in this process; not rebuilt)",
                                reason="image_build")
    try:
        built = await build()
    except SandboxStartError as exc:
        _failed_builds[ref] = str(exc)
        raise
    return built.log


async def _present_or_pulled(binary: str, ref: str, pull: str, *, remember: bool) -> EnsuredImage | str:
    """The named image (local or pulled now), else why not."""
    facts = None if pull == "always" else await inspect_image(binary, ref)
    source = "local"
    if facts is None:
        if pull == "never":
            return "not present and sandbox.docker.pull=never"
        if ref in _failed_pulls:
            return f"{_failed_pulls[ref]} (failed earlier in this process; not retried)"
        rc, _, err = await run_engine(binary, "pull", ref, timeout=1800)
        if rc != 0:
            why = f"pull failed: {err.strip()[-600:]}"
            if remember:  # only where a build follows: a pull-only run must be able to retry it
                _failed_pulls[ref] = why
            return why
        facts = await inspect_image(binary, ref)
        if facts is None:
            return "pulled but not found afterwards"
        source = "pulled"
    prov = ImageProvenance(source=source, image_id=facts.image_id, base_standin=facts.standin, ref=ref)
    return EnsuredImage(ref, facts, prov, replay=True)


def _failure_marker(tag: str, scope: str, lock_dir: Path | None) -> Path:
    """Where a failed build of ``tag`` is recorded for the run ``scope``, for every process."""
    key = hashlib.sha256(scope.encode()).hexdigest()[:16]
    return _lock_dir(lock_dir) / f"{sanitise(tag)}.{key}.failed"


@contextlib.contextmanager
def _strict_copy(dockerfile: Path) -> Iterator[Path]:
    """The Dockerfile to build: a temporary copy whose RUN pipelines fail when any command in
    them fails (:func:`farm.sandbox.pipefail.strict_dockerfile`), or the file itself when none
    has a pipe. The build context stays the task's; a ``<name>.dockerignore`` beside the
    Dockerfile is copied along (BuildKit reads it from the Dockerfile's directory)."""
    text = strict_dockerfile(dockerfile)
    if text is None:
        yield dockerfile
        return
    with tempfile.TemporaryDirectory(prefix="farm-dockerfile-") as tmp:
        copy = Path(tmp) / dockerfile.name
        copy.write_text(text, encoding="utf-8")
        ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
        if ignore.is_file():
            shutil.copyfile(ignore, Path(tmp) / ignore.name)
        yield copy


async def build_image(binary: str, task: Task, *, pull: str = "missing", lock_dir: Path | None = None,
                      after: str = "", registry: str | None = None, scope: str | None = None,
                      min_free_gb: float | None = None) -> EnsuredImage:
    """Build the task's Dockerfile under its content-hashed tag, or reuse the tag if it exists.

    ``scope`` (a run id): a failed build is also recorded on disk for that run, so trials of
    the task in other worker processes of the same run fail at once instead of rebuilding.
    ``min_free_gb``: before building, farm's oldest builds are removed until this much is free
    on the engine's storage (:func:`farm.sandbox.images.cache.evict_for_space`).

    Raises:
        SandboxStartError: ``image_build`` with the failing step and the log tail.
    """
    dockerfile = dockerfile_of(task)
    if dockerfile is None:
        raise SandboxStartError(f"task {task.task_id}: no environment/Dockerfile to build", reason="image_build")
    context = build_context(task, dockerfile)
    # the bases as the engine has them now: a base rebuilt under its old tag is a new build
    digest = build_digest(dockerfile, context, await base_identities(binary, dockerfile, pull=pull != "never"))
    tag = task_tag(task, digest, registry)
    if tag in _failed_builds:
        raise SandboxStartError(_failed_builds[tag] + "\n(failed earlier in this process; not rebuilt)",
                                reason="image_build")
    marker = _failure_marker(tag, scope, lock_dir) if scope else None
    async with tag_lock(tag, lock_dir):
        facts = await inspect_image(binary, tag)
        if facts is not None:
            prov = ImageProvenance("cached", facts.image_id, 0.0, facts.standin, ref=tag)
            return EnsuredImage(tag, facts, prov, replay=False)
        if marker is not None and marker.is_file():
            msg = marker.read_text(errors="replace")
            _failed_builds[tag] = msg
            raise SandboxStartError(msg + "\n(failed earlier in this run; not rebuilt)", reason="image_build")
        if min_free_gb is not None:
            await cache.evict_for_space(binary, int(min_free_gb * cache.GIB), keep=frozenset({tag}))
        with _strict_copy(dockerfile) as built_from:
            args = ["build", pull_flag(await engine_kind(binary), pull), "-f", str(built_from), "-t", tag,
                    "--label", f"{TASK_LABEL}={task.benchmark}/{task.task_id}", "--label",
                    f"{DIGEST_LABEL}={digest}", str(context)]
            t0 = time.monotonic()
            rc, out, err = await run_engine(binary, *args, timeout=task.environment.build_timeout_s)
            build_s = time.monotonic() - t0
        head = (f"# {binary} {' '.join(args)}\n"
                + (f"# {dockerfile} with pipefail on its RUN pipelines (docs/sandboxes.md)\n"
                   if built_from != dockerfile else "")
                + (f"# the named image was not used: {after}\n" if after else ""))
        log = head + out + ("\n" if out and not out.endswith("\n") else "") + err
        facts = await inspect_image(binary, tag) if rc == 0 else None
        if facts is None:
            said = (out + err).strip()
            if not said:  # an empty tail tells nobody anything: say that the engine said nothing
                log += f"(the engine printed nothing: `{binary} {' '.join(args)}` exited with code {rc})\n"
            step = failing_step(log) or "(no step started)"
            why = "timed out" if rc == 124 else f"exited with code {rc}"
            # the engine's last words in the first line: the breaker and the summaries show only that
            last = said.splitlines()[-1].strip()[:300] if said else "the engine printed nothing"
            msg = (f"task {task.task_id}: building {dockerfile} as {tag} {why} after {build_s:.0f} s at "
                   f"step {step}: {last}; log tail:\n{log[-2500:]}")
            _failed_builds[tag] = msg
            if marker is not None:
                marker.write_text(msg)
            error = SandboxStartError(msg, reason="image_build")
            error.build_log = log.encode()  # type: ignore[attr-defined]
            raise error
        prov = ImageProvenance("built", facts.image_id, round(build_s, 3), facts.standin, ref=tag)
        return EnsuredImage(tag, facts, prov, replay=False, log=log.encode())


def forget_failures() -> None:
    """Forget remembered pull and build failures (a new run in a long-lived process, tests)."""
    _failed_pulls.clear()
    _failed_builds.clear()
