"""The verifier cache the grading and trial tests stage into sandboxes (``make verifier-cache``'s output)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from farm.grade import verifier_cache as vc

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "build" / "verifier-cache"


def ensure_cache() -> Path:
    """``make verifier-cache``'s output with the defaults: built here when absent or made by an
    older builder (a no-op when it is up to date)."""
    try:
        vc.build(CACHE, list(vc.TOOL_REQUIREMENTS))
    except (vc.CacheError, OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot build the verifier cache (needs PyPI, deb.debian.org, patchelf): {exc}")
    return CACHE
