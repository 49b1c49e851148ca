"""Which tasks to load: ``task_ids``, a seeded ``sample`` and ``limit``, applied before parsing.

Selection works on candidates (task directories, dataset rows) by their cheap key (the
directory name, the row's id); only a wanted id that matches no key makes it read the
candidates' declared ids (``[task].name``), and still without loading any task.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from farm.config import BenchmarkConfig
from farm.errors import ConfigError


def select_ids(items: list[Any], key: Callable[[Any], str], declared: Callable[[Any], str | None],
               wanted: Sequence[str], benchmark: str) -> list[Any]:
    """The candidates whose key (or declared id) is in ``wanted``, in benchmark order."""
    want = set(wanted)
    picked = {id(i) for i in items if key(i) in want}
    found = {key(i) for i in items if key(i) in want}
    if found != want:
        for item in items:
            if id(item) not in picked:
                name = declared(item)
                if name in want:
                    picked.add(id(item))
                    found.add(name)
    unknown = [t for t in wanted if t not in found]
    if unknown:
        raise ConfigError(f"invalid value {unknown[:10]!r} for 'benchmark.task_ids': not in benchmark {benchmark!r}")
    return [i for i in items if id(i) in picked]


Select = Callable[[list[Any], Callable[[Any], str], Callable[[Any], "str | None"]], list[Any]]


def selector(cfg: BenchmarkConfig, benchmark: str) -> Select | None:
    """A function applying the config's task_ids, then sample, then limit; None when none is set."""
    if cfg.limit is not None and cfg.limit < 0:
        raise ConfigError(f"invalid value {cfg.limit!r} for 'benchmark.limit': must be >= 0")
    if cfg.sample is not None and cfg.sample < 0:
        raise ConfigError(f"invalid value {cfg.sample!r} for 'benchmark.sample': must be >= 0")
    if not cfg.task_ids and cfg.sample is None and cfg.limit is None:
        return None

    def select(items: list[Any], key: Callable[[Any], str], declared: Callable[[Any], str | None]) -> list[Any]:
        if cfg.task_ids:
            items = select_ids(items, key, declared, list(cfg.task_ids), benchmark)
        if cfg.sample is not None and cfg.sample < len(items):
            chosen = set(random.Random(cfg.sample_seed).sample(range(len(items)), cfg.sample))
            items = [item for n, item in enumerate(items) if n in chosen]
        if cfg.limit is not None:
            items = items[: cfg.limit]
        return items

    return select
