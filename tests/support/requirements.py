"""What a test needs from the machine: bubblewrap, root, a container engine, other programs.

Tests say it with markers and the conftest hook skips them with one line naming what is
missing (``pytest.mark.bwrap``, ``pytest.mark.root``, ``pytest.mark.engine``,
``pytest.mark.tools("git", "nsenter")``). Fixtures that need the same call :func:`require`,
so a marker and a fixture give the same message for the same gap.

``FARM_TEST_WITHOUT=bwrap,root,engine,git`` pretends those are missing: the marked tests then
skip as they would on a machine without them (how the unit tier is checked to need none).
"""

from __future__ import annotations

import os
import shutil

import pytest

WITHOUT_ENV = "FARM_TEST_WITHOUT"
# the markers the hook reads (registered in pyproject.toml)
MARKERS = ("bwrap", "root", "engine", "tools")
ENGINES = ("podman",)


def _pretend_missing() -> set[str]:
    return {name.strip() for name in os.environ.get(WITHOUT_ENV, "").split(",") if name.strip()}


def _gap(need: str) -> str | None:
    """None when the machine meets ``need``, else a phrase naming what is missing and how to get it.
    Read at call time, not import time: tests may change PATH."""
    if need == "root":
        uid = os.geteuid()
        return None if uid == 0 else f"root (running as uid {uid})"
    if need == "bwrap":
        return None if shutil.which("bwrap") else "bubblewrap (bwrap not on PATH: apt-get install bubblewrap)"
    if need == "engine":
        found = any(shutil.which(engine) for engine in ENGINES)
        return None if found else "a container engine (podman not on PATH: apt-get install podman)"
    return None if shutil.which(need) else f"{need} (not on PATH)"


def missing(*needs: str) -> list[str]:
    """The requirements in ``needs`` this machine lacks, each as a short phrase.

    ``bwrap``: bubblewrap; ``root``: euid 0; ``engine``: podman; any other name: that program on PATH.
    """
    pretend = _pretend_missing()
    gaps: list[str] = []
    for need in dict.fromkeys(needs):
        gap = f"{need} ({WITHOUT_ENV} names it)" if need in pretend else _gap(need)
        if gap:
            gaps.append(gap)
    return gaps


def skip_message(gaps: list[str]) -> str:
    return "needs " + ", ".join(gaps)


def require(*needs: str) -> None:
    """Skip the calling test (one line naming what is missing) unless the machine has ``needs``."""
    gaps = missing(*needs)
    if gaps:
        raise pytest.skip.Exception(skip_message(gaps), _use_item_location=True)


def marked_needs(item: pytest.Item) -> list[str]:
    """What the item's ``bwrap``/``root``/``engine``/``tools(...)`` markers ask for, in that order."""
    needs: list[str] = []
    for name in ("bwrap", "root", "engine"):
        if item.get_closest_marker(name) is not None:
            needs.append(name)
    for mark in item.iter_markers("tools"):
        needs.extend(mark.args)
    return needs
