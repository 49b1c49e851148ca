"""Resolve ``benchmark.*`` config into tasks: a directory, the bundled suite, or a pinned source.

``benchmark.name`` may name a registered source (``swebench_verified``, ``swebench-pro``, ...);
with ``benchmark.path`` too, the directory is read with that source's rules (defaults, image
lock, success marker, patch requirement) and labelled with its name, and its revision is
recorded only if git confirms the copy is a clean checkout of the pinned one. Selection
(``task_ids``, ``sample``, ``limit``) happens before any task is parsed; each selected task
loads or fails on its own (see ``farm.tasks.loading``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from farm.config import BenchmarkConfig
from farm.errors import ConfigError
from farm.tasks.harbor import HarborDefaults, declared_id, harbor_candidates, load_harbor_tasks
from farm.tasks.loading import LoadedBenchmark
from farm.tasks.model import Source, Task
from farm.tasks.selection import selector

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"
# terminal tasks are not git repositories: their patch is simply empty
_PLAIN = HarborDefaults(require_git_patch=False)
# The bundled SWE-bench-style and security tasks are git repositories graded on the agent's
# patch, so they get what patch-graded tasks get by default: history stripped before the agent
# starts, and the agent's leftover processes killed before the verifier (a daemon the agent
# left could otherwise rewrite the reward). Terminal tasks keep their processes: a server the
# agent started can be the answer.
BUILTIN_PATCH_GRADED = ("swe", "security")


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
    from farm.tasks import sources  # git and locks only when a source is used

    select = selector(cfg, cfg.name)
    key = sources.source_key(cfg.name) if cfg.name != "builtin" else None
    if cfg.path:
        path = Path(cfg.path).expanduser()
        if not path.is_dir():
            raise ConfigError(f"invalid value {cfg.path!r} for 'benchmark.path': not a directory")
        if key is not None:
            src = sources.get_source(key)
            source = Source(url=str(path.resolve()), revision=sources.verified_revision(path, src), subpath=src.subpath)
            loaded = sources.load_source(src, path, select=select, source=source)
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
        src = sources.get_source(cfg.name)
        directory = sources.materialize(src, Path(cfg.cache_dir) if cfg.cache_dir else None, mirror=cfg.mirror)
        loaded = sources.load_source(src, directory, select=select)
    return loaded.enforce(cfg.strict, quiet=quiet)


def load_benchmark(cfg: BenchmarkConfig) -> list[Task]:
    """The configured benchmark's tasks (failures are logged; see :func:`load_benchmark_report`)."""
    return load_benchmark_report(cfg, quiet=False).tasks
