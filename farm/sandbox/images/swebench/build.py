"""Build (or find) the stand-in for a SWE-bench instance image under podman or docker.

:func:`ensure_instance` makes ``swebench/sweb.eval.x86_64.<id>:latest`` present in the engine's
local storage from the row, the repository mirror and a CPython prefix: base, environment and
instance layers (farm/sandbox/images/swebench/recipe.py), each built once under a content-hashed
tag (the instance under its published name, with the recipe hash as a label) while holding the
tag's cross-process lock, so two trials or two processes never build the same layer at once.
Each layer's build log is kept and returned; a failed layer names itself, its step and the log tail.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.sandbox.base import SandboxStartError
from farm.sandbox.images.engine import run_engine
from farm.sandbox.images.local import failing_step, inspect_image, tag_lock
from farm.sandbox.images.swebench.python import find_python, stage_python
from farm.sandbox.images.swebench.recipe import (
    DEFAULT_ROOT,
    RECIPE_LABEL,
    Layer,
    base_layer,
    env_layer,
    instance_layer,
)
from farm.tasks.swebench import spec
from farm.tasks.swebench.mirror import RepoMirror


@dataclass
class BuiltInstance:
    tag: str
    image_id: str
    built: list[str] = field(default_factory=list)  # layers built now (tags); empty: all cached
    build_s: float = 0.0
    log: str = ""  # the build logs of what was built now


async def build_layer(binary: str, layer: Layer, stage: Any, *, timeout: float, lock_dir: Path | None,
                      out: BuiltInstance, check_label: bool = False, label: str = RECIPE_LABEL) -> str:
    """Build ``layer`` unless its tag (with ``label`` equal to its recipe key, where asked) exists;
    its image id. ``stage(ctx)`` adds what the build context needs besides the layer's files."""
    async with tag_lock(layer.tag, lock_dir):
        facts = await inspect_image(binary, layer.tag)
        if facts is not None and (not check_label or facts.labels.get(label) == layer.key):
            return facts.image_id
        with tempfile.TemporaryDirectory(prefix="farm-swebench-") as tmp:
            ctx = Path(tmp)
            (ctx / "Dockerfile").write_text(layer.dockerfile)
            for rel, data in layer.files.items():
                (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
                (ctx / rel).write_bytes(data)
            stage(ctx)
            t0 = time.monotonic()
            args = ["build", "--pull=never", "-f", str(ctx / "Dockerfile"), "-t", layer.tag, str(ctx)]
            rc, stdout, stderr = await run_engine(binary, *args, timeout=timeout)
            took = time.monotonic() - t0
        log = f"# {binary} build -t {layer.tag} ({took:.0f} s, exit {rc})\n{stdout}\n{stderr}\n"
        out.log += log
        out.build_s += took
        facts = await inspect_image(binary, layer.tag) if rc == 0 else None
        if facts is None:
            why = "timed out" if rc == 124 else f"exited with code {rc}"
            error = SandboxStartError(f"building the SWE-bench layer {layer.tag} {why} after {took:.0f} s at step "
                                      f"{failing_step(log) or '(none started)'}; log tail:\n{log[-2500:]}",
                                      reason="image_build")
            error.build_log = out.log.encode()  # type: ignore[attr-defined]
            raise error
        out.built.append(layer.tag)
        return facts.image_id


async def ensure_instance(binary: str, row: dict[str, Any], repos: str | None, *, pythons: str | None = None,
                          root: str = DEFAULT_ROOT, timeout: float = 3600, lock_dir: Path | None = None
                          ) -> BuiltInstance:
    """The instance stand-in for ``row``, built where absent or out of date.

    Raises:
        SandboxStartError: ``image_build`` — no mirror configured, the mirror or the CPython is
            missing (a configuration error, named), or a layer failed to build.
    """
    if not repos:
        raise SandboxStartError(f"{row['instance_id']}: building a SWE-bench instance image needs benchmark.repos "
                                "(a directory of repository mirrors named <owner>+<name>)", reason="image_build")
    tag = "docker.io/" + spec.instance_image(row)
    out = BuiltInstance(tag, "")
    try:
        mirror = RepoMirror.at(repos)
        mirror.require_commit(row["repo"], row["base_commit"])
        test_spec = spec.test_spec(row, mirror)
        python = find_python(str(spec.specs_of(row)["python"]), pythons)
    except (ValueError, RuntimeError) as exc:  # ConfigError, MirrorError, NetworkRefused
        raise SandboxStartError(f"{row['instance_id']}: {exc}", reason="image_build") from exc
    root_facts = await inspect_image(binary, root)
    if root_facts is None:
        raise SandboxStartError(f"the SWE-bench base needs the image {root} (make images builds it)",
                                reason="image_build")
    base = base_layer(root, root_facts.image_id)
    env = env_layer(test_spec, base, python)
    version_tag = mirror.version_tag(row["repo"], row["base_commit"], str(row.get("version") or "") or None)
    inst = instance_layer(test_spec, row, env, python, tag, spec.SWEBENCH_VERSION,
                          mirror.scm_version(row["repo"], row["base_commit"]), version_tag)

    def stage_env(ctx: Path) -> None:
        if python.path is not None:
            stage_python(python, ctx / "python")

    def stage_instance(ctx: Path) -> None:
        mirror.checkout(row["repo"], row["base_commit"], ctx / "testbed", tag=version_tag)
        shutil.rmtree(ctx / "testbed" / ".git" / "hooks", ignore_errors=True)

    await build_layer(binary, base, lambda ctx: None, timeout=timeout, lock_dir=lock_dir, out=out)
    await build_layer(binary, env, stage_env, timeout=timeout, lock_dir=lock_dir, out=out)
    out.image_id = await build_layer(binary, inst, stage_instance, timeout=timeout, lock_dir=lock_dir, out=out,
                                      check_label=True)
    return out
