"""Config factory: the overrides a test run of local tasks starts from, and the config they build.

Dotted overrides merge in order, so a test's own ``extra`` (after these) wins over them.
"""

from __future__ import annotations

from pathlib import Path

from farm.config import FarmConfig, load_config


def local_run_overrides(tmp_path: Path, tasks: Path, *extra: str, sandboxes: str = "sandboxes") -> list[str]:
    """Run the Harbor tasks under ``tasks`` in-process (run.executor=local) in local sandboxes under
    ``tmp_path/<sandboxes>``, store under ``tmp_path/store``, no retry wait, no progress bar."""
    return [f"benchmark.path={tasks}", "run.executor=local", f"store.uri={tmp_path / 'store'}",
            f"sandbox.local.root_dir={tmp_path / sandboxes}", "run.retry_backoff_s=0", "run.progress=false",
            *extra]


def local_run_config(tmp_path: Path, tasks: Path, *extra: str, sandboxes: str = "sandboxes") -> FarmConfig:
    """``load_config`` of :func:`local_run_overrides`."""
    return load_config(local_run_overrides(tmp_path, tasks, *extra, sandboxes=sandboxes))


def make_config(*overrides: str) -> FarmConfig:
    """The config the CLI builds from these overrides on the embedded defaults."""
    return load_config(list(overrides))
