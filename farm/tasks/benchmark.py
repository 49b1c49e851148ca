"""Resolve ``benchmark.*`` config into tasks: a directory, the bundled suite, or a pinned source.

``benchmark.name`` may name a registered source (``swebench_verified``, ``swebench-pro``, ...);
with ``benchmark.path`` too, the directory is read with that source's rules (defaults, image
lock, success marker, patch requirement) and labelled with its name, and its revision is
recorded only if git confirms the copy is a clean checkout of the pinned one. Selection
(``task_ids``, ``sample``, ``limit``) happens before any task is parsed; each selected task
loads or fails on its own (see ``farm.tasks.loading``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from farm.config import BenchmarkConfig
from farm.errors import ConfigError
from farm.tasks import catalog, fetch
from farm.tasks.catalog import BenchmarkSource
from farm.tasks.harbor import HarborDefaults, declared_id, harbor_candidates, load_harbor_tasks
from farm.tasks.image_lock import apply_image_policy, load_image_lock
from farm.tasks.loading import LoadedBenchmark
from farm.tasks.model import Source, Task
from farm.tasks.patcheval import load_patcheval_rows
from farm.tasks.selection import select_ids, selector
from farm.tasks.swebench.load import convert_harbor_copies, load_rows
from farm.tasks.swebench.rows import SUFFIXES as ROW_SUFFIXES
from farm.tasks.swebench.rows import is_rows_file
from farm.tasks.swebench_pro.load import convert_harbor_copies as convert_pro_harbor_copies
from farm.tasks.swebench_pro.load import load_pro_rows
from farm.tasks.swebench_pro.rows import SUFFIXES as PRO_ROW_SUFFIXES
from farm.tasks.swebench_pro.rows import is_rows_file as is_pro_rows_file

log = logging.getLogger(__name__)

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"
# terminal tasks are not git repositories: their patch is simply empty
_PLAIN = HarborDefaults(require_git_patch=False)
# The bundled SWE-bench-style and security tasks are git repositories graded on the agent's
# patch, so they get what patch-graded tasks get by default: history stripped before the agent
# starts, and the agent's leftover processes killed before the verifier (a daemon the agent
# left could otherwise rewrite the reward). Terminal tasks keep their processes: a server the
# agent started can be the answer.
BUILTIN_PATCH_GRADED = ("swe", "security")
# sources whose instances can come as SWE-bench rows (benchmark.path=FILE) and are graded by the swebench rules
SWEBENCH_SOURCES = ("swebench_verified",)
# sources whose instances can come as SWE-bench Pro rows, graded by each instance's parser.py
PRO_SOURCES = ("swebench_pro",)


def _builtin(loaded: LoadedBenchmark) -> LoadedBenchmark:
    tasks = [replace(t, require_git_patch=t.metadata.get("category") in BUILTIN_PATCH_GRADED) for t in loaded.tasks]
    return replace(loaded, tasks=tasks)


def builtin_tasks() -> list[Task]:
    loaded = load_harbor_tasks(harbor_candidates(BUILTIN_DIR), "builtin", defaults=_PLAIN,
                               source=Source(url="farm:builtin", revision="bundled"))
    return _builtin(loaded.enforce(strict=True)).tasks  # the bundled suite must always load whole


def load_benchmark_report(cfg: BenchmarkConfig, *, quiet: bool = True) -> LoadedBenchmark:
    """The configured benchmark's tasks and its load report (failures, unhonoured fields).

    ``quiet``: the caller prints the report; otherwise it is logged as warnings.

    Raises:
        ConfigError: the benchmark cannot be found or fetched, a selected id does not exist,
            or ``benchmark.strict`` is on and a task failed to load.
    """
    select = selector(cfg, cfg.name)
    key = catalog.source_key(cfg.name) if cfg.name != "builtin" else None
    if cfg.path:
        path = Path(cfg.path).expanduser()
        if key in PRO_SOURCES and is_pro_rows_file(path):
            return load_pro_rows(path, catalog.get_source(key), scripts_dir=cfg.pro_scripts, select=select,
                                 cache_dir=cfg.cache_dir, repos=cfg.repos, pythons=cfg.pythons
                                 ).enforce(cfg.strict, quiet=quiet)
        if is_rows_file(path):
            return _load_rows_file(cfg, path, key, select).enforce(cfg.strict, quiet=quiet)
        if not path.is_dir():
            raise ConfigError(f"invalid value {cfg.path!r} for 'benchmark.path': not a directory "
                              f"(or a SWE-bench rows file: {', '.join(ROW_SUFFIXES)}; SWE-bench Pro rows: "
                              f"{', '.join(PRO_ROW_SUFFIXES)})")
        if key is not None:
            src = catalog.get_source(key)
            source = Source(url=str(path.resolve()), revision=fetch.verified_revision(path, src), subpath=src.subpath)
            loaded = load_source(src, path, select=select, source=source)
        else:
            name = cfg.name if cfg.name != "builtin" else path.name
            dirs = harbor_candidates(path)
            if select is not None:
                dirs = select(dirs, lambda p: p.name, declared_id)
            loaded = load_harbor_tasks(dirs, name, defaults=_PLAIN, source=Source(url=str(path)))
    elif cfg.name == "builtin":
        dirs = harbor_candidates(BUILTIN_DIR)
        if select is not None:
            dirs = select(dirs, lambda p: p.name, declared_id)
        loaded = _builtin(load_harbor_tasks(dirs, "builtin", defaults=_PLAIN,
                                            source=Source(url="farm:builtin", revision="bundled")))
    else:
        src = catalog.get_source(cfg.name)
        directory = fetch.materialize(src, Path(cfg.cache_dir) if cfg.cache_dir else None, mirror=cfg.mirror)
        loaded = load_source(src, directory, select=select)
    if key is not None and key in SWEBENCH_SOURCES:
        loaded = convert_harbor_copies(loaded, repos=cfg.repos, pythons=cfg.pythons, cache_dir=cfg.cache_dir)
    if key is not None and key in PRO_SOURCES:
        loaded = convert_pro_harbor_copies(loaded, cache_dir=cfg.cache_dir)
    return loaded.enforce(cfg.strict, quiet=quiet)


def _load_rows_file(cfg: BenchmarkConfig, path: Path, key: str | None, select: Any) -> LoadedBenchmark:
    """``benchmark.path`` names SWE-bench rows (farm/tasks/swebench/load.py)."""
    if key not in SWEBENCH_SOURCES:
        raise ConfigError(f"invalid value {cfg.path!r} for 'benchmark.path': a rows file is read as a SWE-bench "
                          f"source; set benchmark.name to one of {sorted(SWEBENCH_SOURCES + PRO_SOURCES)} "
                          f"(got {cfg.name!r})")
    return load_rows(path, catalog.get_source(key), select=select, repos=cfg.repos, pythons=cfg.pythons,
                     cache_dir=cfg.cache_dir)


def load_benchmark_tasks(cfg: BenchmarkConfig) -> list[Task]:
    """The configured benchmark's tasks (failures are logged; see :func:`load_benchmark_report`)."""
    return load_benchmark_report(cfg, quiet=False).tasks


def load_source(
    src: BenchmarkSource,
    directory: Path,
    *,
    select: Callable[[list[Any], Callable[[Any], str], Callable[[Any], str | None]], list[Any]] | None = None,
    source: Source | None = None,
    image_registry: str | None = None,
    image_lock: str | None | bool = True,
) -> LoadedBenchmark:
    """The source's tasks from ``directory`` with the source's rules (defaults, lock, marker, patch).

    ``select(items, key, declared)`` picks what to load before anything is parsed.
    """
    source = source or src.source
    pick = select or (lambda items, key, declared: items)
    if src.loader == "harbor":
        dirs = pick(harbor_candidates(directory), lambda p: p.name, declared_id)
        loaded = load_harbor_tasks(dirs, src.name, defaults=src.harbor_defaults(), source=source)
    else:
        path = directory / str(src.file) if (directory / str(src.file)).is_file() else directory
        loaded = load_patcheval_rows(path, src.name, source=source, select=pick)
    lock_name = src.image_lock if image_lock is True else (image_lock or None)
    lock = load_image_lock(lock_name) if lock_name else None
    tasks = apply_image_policy(loaded.tasks, registry=image_registry, default_registry=src.default_image_registry,
                               lock=lock)
    if select is None and len(tasks) != src.expected_tasks:
        log.warning("benchmark %s: %d tasks loaded, the published denominator is %d",
                    src.name, len(tasks), src.expected_tasks)
    tasks = [replace(t, metadata={**t.metadata, "pod_prefix": src.pod_prefix}) for t in tasks]
    return LoadedBenchmark(tasks, loaded.report)


def load_pinned_source(
    name: str,
    *,
    cache_dir: Path | None = None,
    root: Path | None = None,
    offline: bool = False,
    mirror: str | None = None,
    image_registry: str | None = None,
    image_lock: str | None | bool = True,
    task_ids: Iterable[str] | None = None,
) -> list[Task]:
    """Every task of the pinned source ``name`` (or the selected ``task_ids``), images resolved
    for pulling, without a config (tests, tools).

    ``root`` reads an already materialised subpath directory (tests, air-gapped mirrors).
    ``image_lock=True`` applies the source's own lock, a string names another, False/None none.
    A selected task id that the benchmark does not have is an error, as is a task missing
    from the lock; both happen here, before any sandbox exists. Tasks that fail to load are
    logged and skipped (``load_benchmark_report`` reports them).
    """
    src = catalog.get_source(name)
    directory = Path(root) if root is not None else fetch.materialize(src, cache_dir, offline=offline, mirror=mirror)
    select = None
    if task_ids is not None:
        wanted = list(dict.fromkeys(task_ids))

        def select(items: list[Any], key: Callable[[Any], str], declared: Callable[[Any], str | None]) -> list[Any]:
            return select_ids(items, key, declared, wanted, src.name)

    loaded = load_source(src, directory, select=select, image_registry=image_registry, image_lock=image_lock)
    return loaded.enforce(strict=False, quiet=False).tasks
