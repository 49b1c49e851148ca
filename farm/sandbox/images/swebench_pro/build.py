"""Build (or find) the stand-in for a SWE-bench Pro instance image under podman or docker.

:func:`ensure_pro_instance` makes ``jefzda/sweap-images:<dockerhub_tag>`` present in the engine's
local storage from the instance's two Dockerfiles (``benchmark.pro_scripts``), the repository
mirror (``benchmark.repos``) and, for a Python other than 3.11, a CPython prefix
(``benchmark.pythons``): an environment layer per base Dockerfile, then the instance under its
published name with the recipe hash as a label (farm/sandbox/images/swebench_pro/recipe.py),
each built once under a cross-process lock (farm/sandbox/images/swebench/build.py ``build_layer``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from farm.sandbox.base import SandboxStartError
from farm.sandbox.images.local import inspect_image
from farm.sandbox.images.swebench.build import BuiltInstance, build_layer
from farm.sandbox.images.swebench.python import find_python, stage_python
from farm.sandbox.images.swebench.recipe import DEFAULT_ROOT
from farm.sandbox.images.swebench_pro.recipe import (
    IMAGE_PREFIX,
    RECIPE_LABEL,
    SLIM_311,
    env_layer,
    instance_layer,
    read_pro_recipe,
)
from farm.sandbox.images.swebench_pro.side import side_repos
from farm.tasks.swebench.mirror import RepoMirror
from farm.tasks.swebench_pro.rows import image_tag
from farm.tasks.swebench_pro.scripts import ProScripts


def pro_image(row: dict[str, Any]) -> str:
    """The instance image as the engine names it locally."""
    return IMAGE_PREFIX + image_tag(row)


async def ensure_pro_instance(binary: str, row: dict[str, Any], repos: str | None, scripts_dir: str | None, *,
                              pythons: str | None = None, root: str = DEFAULT_ROOT, timeout: float = 3600,
                              lock_dir: Path | None = None) -> BuiltInstance:
    """The instance stand-in for ``row``, built where absent or out of date.

    Raises:
        SandboxStartError: ``image_build`` — no mirror or recipe configured, a commit, a CPython or a
            base image missing (a configuration error, named), or a layer failed to build.
    """
    iid = row["instance_id"]
    if not repos or not scripts_dir:
        raise SandboxStartError(f"{iid}: building a SWE-bench Pro instance image needs benchmark.repos (repository "
                                "mirrors named <owner>+<name>) and benchmark.pro_scripts (a copy of "
                                "scaleapi/SWE-bench_Pro-os, for the instance's Dockerfiles)", reason="image_build")
    tag = pro_image(row)
    out = BuiltInstance(tag, "")
    try:
        scripts = ProScripts.at(scripts_dir)
        base_df = scripts.dockerfile(iid, "base_dockerfile")
        inst_df = scripts.dockerfile(iid, "instance_dockerfile")
        if base_df is None or inst_df is None:
            raise ValueError(f"benchmark.pro_scripts={scripts_dir} has no dockerfiles/*/{iid}/Dockerfile")
        recipe = read_pro_recipe(iid, base_df, inst_df)
        mirror = RepoMirror.at(repos)
        mirror.require_commit(row["repo"], row["base_commit"])
        python = None if recipe.on_slim_311 else find_python(recipe.python, pythons)
    except (ValueError, RuntimeError) as exc:  # ConfigError, MirrorError
        raise SandboxStartError(f"{iid}: {exc}", reason="image_build") from exc
    if python is not None and python.path is None:
        raise SandboxStartError(f"{iid}: SWE-bench Pro needs a CPython {recipe.python} prefix in benchmark.pythons",
                                reason="image_build")
    root_ref = root if python is not None else SLIM_311
    root_facts = await inspect_image(binary, root_ref)
    if root_facts is None:
        how = "make images" if python is not None else "scripts/standin_images.py --only python:3.11-slim"
        raise SandboxStartError(f"{iid}: the SWE-bench Pro stand-in needs the image {root_ref} ({how} builds it)",
                                reason="image_build")
    base_desc = (f"{recipe.base_image} is the Debian bookworm root with CPython {python.version} in /usr/local"
                 if python is not None else f"python:3.11 is farm's Debian stand-in {SLIM_311} "
                 f"({root_facts.labels.get('io.farm.standin.differences', 'Debian python3')})")
    try:
        side = side_repos(mirror, row["repo"], row["base_commit"])
        # a mirror that lacks some file content (a snapshot leaves its largest files out) still
        # serves the commit, those files left out of the work tree; the image says which
        missing = mirror.missing_blobs(row["repo"], row["base_commit"])
    except (ValueError, RuntimeError) as exc:
        raise SandboxStartError(f"{iid}: {exc}", reason="image_build") from exc
    notes = side.notes + ([f"content absent from the repository mirror, left out of the work tree (sparse "
                           f"checkout): {', '.join(missing)}"] if missing else [])
    env = env_layer(recipe, row["repo"], root_ref, root_facts.image_id, python)
    inst = instance_layer(recipe, env, row["base_commit"], tag, base_desc, side.lines(), notes)

    def stage_env(ctx: Path) -> None:
        if python is not None:
            stage_python(python, ctx / "python")

    def stage_instance(ctx: Path) -> None:
        if missing:
            mirror.checkout_without(row["repo"], row["base_commit"], ctx / "app", missing)
        else:
            mirror.checkout(row["repo"], row["base_commit"], ctx / "app")
        shutil.rmtree(ctx / "app" / ".git" / "hooks", ignore_errors=True)
        side.stage(mirror, ctx)

    await build_layer(binary, env, stage_env, timeout=timeout, lock_dir=lock_dir, out=out)
    out.image_id = await build_layer(binary, inst, stage_instance, timeout=timeout, lock_dir=lock_dir, out=out,
                                     check_label=True, label=RECIPE_LABEL)
    return out
