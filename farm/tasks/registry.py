"""Resolve ``benchmark.*`` config into tasks: a directory, the bundled suite, or a pinned source."""

from __future__ import annotations

from pathlib import Path

from farm.config import BenchmarkConfig
from farm.errors import ConfigError
from farm.tasks.harbor import HarborDefaults, load_harbor_dir
from farm.tasks.model import Source, Task

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"


def builtin_tasks() -> list[Task]:
    # terminal tasks are not git repositories: their patch is simply empty
    return load_harbor_dir(BUILTIN_DIR, "builtin", defaults=HarborDefaults(require_git_patch=False),
                           source=Source(url="farm:builtin", revision="bundled"))


def load_benchmark(cfg: BenchmarkConfig) -> list[Task]:
    """All tasks of the configured benchmark, filtered by task_ids and limit (in that order)."""
    if cfg.path:
        path = Path(cfg.path).expanduser()
        if not path.is_dir():
            raise ConfigError(f"invalid value {cfg.path!r} for 'benchmark.path': not a directory")
        name = cfg.name if cfg.name != "builtin" else path.name
        tasks = load_harbor_dir(path, name, defaults=HarborDefaults(require_git_patch=False), source=Source(url=str(path)))
    elif cfg.name == "builtin":
        tasks = builtin_tasks()
    else:
        try:
            from farm.tasks import sources
        except ImportError as exc:  # pragma: no cover - sources ships with farm
            raise ConfigError(f"benchmark {cfg.name!r} needs farm.tasks.sources: {exc}") from None
        tasks = sources.load_benchmark(cfg.name, cache_dir=Path(cfg.cache_dir).expanduser())
    if cfg.task_ids:
        known = {t.task_id for t in tasks}
        unknown = [t for t in cfg.task_ids if t not in known]
        if unknown:
            raise ConfigError(f"invalid value {unknown!r} for 'benchmark.task_ids': not in benchmark {cfg.name!r}")
        wanted = set(cfg.task_ids)
        tasks = [t for t in tasks if t.task_id in wanted]
    if cfg.limit is not None:
        if cfg.limit < 0:
            raise ConfigError(f"invalid value {cfg.limit!r} for 'benchmark.limit': must be >= 0")
        tasks = tasks[: cfg.limit]
    return tasks
