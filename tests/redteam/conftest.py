"""The red-team suite's record: every cell (attack, grader, backend) -> outcome, written at the
end of the session to build/redteam/results.json, merged with cells earlier sessions wrote (a
local-only run keeps the podman cells of the last run that had podman).
``make integrity-table`` (scripts/integrity_table.py) turns it into the table in docs/integrity.md."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "build" / "redteam" / "results.json"
_cells: list[dict[str, Any]] = []


@pytest.fixture
def record() -> Any:
    return _cells.append


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _cells:
        return
    old: list[dict[str, Any]] = []
    try:
        old = json.loads(RESULTS.read_text()).get("cells", [])
    except (OSError, ValueError):
        pass
    key = lambda c: (c["attack"], c["grader"], c["backend"])  # noqa: E731
    merged = {key(c): c for c in old} | {key(c): c for c in _cells}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"cells": sorted(merged.values(), key=key)}, indent=1) + "\n")
    tmp.replace(RESULTS)
