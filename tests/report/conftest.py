"""Two real runs of one small experiment, shared by the export and diff tests (tests/support/demo_runs.py)."""

from __future__ import annotations

import pytest

from tests.support.demo_runs import DemoRuns, make_demo_runs
from tests.support.requirements import require


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> DemoRuns:
    require("bwrap")  # two real runs in local sandboxes: skip, naming it, without bubblewrap
    return make_demo_runs(tmp_path_factory.mktemp("demo-runs"))
