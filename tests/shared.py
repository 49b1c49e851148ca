"""Where tests find ``../shared``, and what they do when a checkout has none beside it.

``../shared`` (the folder next to the repository root) holds the project's read-only reference
sheets and third-party task directories that are not bundled in the repo. A fresh clone has
no such folder: tests that need it skip with one line naming the path. CI has it and sets
``FARM_REQUIRE_SHARED=1``, which turns those skips into failures so that none goes unnoticed.
``FARM_SHARED_DIR`` points at another copy (a relative value is read from the repo root).

Data every checkout needs (dataset rows, logs with verdicts, vendor presets) is bundled under
``tests/fixtures/`` instead; see its README for where each file came from.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "tests" / "fixtures"  # copied into the repo: present in every checkout
SHARED_DIR_ENV = "FARM_SHARED_DIR"
REQUIRE_SHARED_ENV = "FARM_REQUIRE_SHARED"


def env_flag(name: str) -> bool:
    """True when the variable is set to something other than empty, 0, false or no."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def shared_root() -> Path:
    """The ``../shared`` folder beside the repo root, or the one ``FARM_SHARED_DIR`` names."""
    override = os.environ.get(SHARED_DIR_ENV)
    if override:
        path = Path(override).expanduser()
        return path if path.is_absolute() else REPO / path
    return REPO.parent / "shared"


def shared_path(*parts: str) -> Path:
    """``../shared/<parts>``; skips the calling test when it is absent (fails under FARM_REQUIRE_SHARED=1)."""
    path = shared_root().joinpath(*parts)
    if not path.exists():
        rel = "/".join(("../shared", *parts))
        message = f"needs {rel} ({path}): not present beside this checkout"
        if env_flag(REQUIRE_SHARED_ENV):
            pytest.fail(f"{message}, and {REQUIRE_SHARED_ENV}=1 requires it", pytrace=False)
        # reported at the test that asked, not at this line (as a skipif mark would be)
        raise pytest.skip.Exception(message, _use_item_location=True)
    return path
