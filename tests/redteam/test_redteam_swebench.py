"""The red team against the SWE-bench protocol grader (``swebench``) on podman: the package's
evaluation script run in the instance's container, its log graded on the host by the package's
parser (farm/grade/swebench.py), with the defaults (in place) and under the strict twin's
overrides (``swebench (strict)``: no network, history sealed, graded in place and fresh from
the patch, a tamper suspect fails).

The instance is tests/support/swebench_instance.py's (the package has none small enough to build
here): its image is built by farm's SWE-bench builder from the package's own scripts on Debian's
python3.11, in the conda-style layout of the published images, once per session (and found
again after, its commits being dated). The attacks are tests/redteam/attacks.py's classes aimed
at this grader (``SWEBENCH_ATTACKS``); the cells and their checks are test_redteam.py's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from farm.config.schema import STRICT_OVERRIDES
from tests.redteam.attacks import SWEBENCH_ATTACKS
from tests.redteam.test_redteam import _check, _command, _run
from tests.support.swebench_instance import benchmark_overrides, make_instance

pytestmark = [pytest.mark.integration, pytest.mark.tools("git")]
REPO = Path(__file__).resolve().parents[2]
ATTACKS = ["honest", *sorted(SWEBENCH_ATTACKS)]
PODMAN = ["sandbox=docker", "sandbox.docker.engine=podman", "sandbox.image_policy=build", "sandbox.docker.pull=never"]


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The instance's row, its benchmark overrides and its image (built, or found up to date)."""
    from tests.benchmarks.standin import ensure_standins

    env = ensure_standins("python:3.11-slim")  # the Debian root the SWE-bench base starts from
    tmp = tmp_path_factory.mktemp("redteam-swebench")
    row, mirror = make_instance(tmp)
    rows = tmp / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    overrides = benchmark_overrides(rows, mirror, tmp)
    build = subprocess.run([sys.executable, "-m", "farm.cli", "images", "build", *overrides,
                            "sandbox.docker.engine=podman", "sandbox.docker.pull=never"],
                           capture_output=True, text=True, env=env, timeout=2400, cwd=REPO)
    assert build.returncode == 0, (build.stdout[-2000:], build.stderr[-2000:])
    return {"row": row, "benchmark": overrides}


def _honest(row: dict[str, Any]) -> str:
    return f"cd /testbed && git apply - <<'GOLD_EOF'\n{row['patch']}GOLD_EOF"


@pytest.mark.parametrize("attack", ATTACKS)
def test_swebench_podman(tmp_path: Path, attack: str, record: Any, instance: dict[str, Any]) -> None:
    """The defaults: the instance's own agent network (public, as the vendor ran SWE-bench;
    podman's network does not reach the test's upstream on the host's loopback), graded fresh
    from the patch as the package grades it (the source's grading mode)."""
    row_in = instance["row"]
    with _command(attack, tmp_path, SWEBENCH_ATTACKS, _honest(row_in), row_in["patch"]) as command:
        row = _run(tmp_path, command, PODMAN, "", benchmark=instance["benchmark"])
    assert row["grading_mode"] == "fresh" and row["history_refs_removed"] is not None
    _check(row, attack, "podman", record, grader="swebench")


@pytest.mark.parametrize("attack", ATTACKS)
def test_swebench_podman_strict(tmp_path: Path, attack: str, record: Any, instance: dict[str, Any]) -> None:
    """The strict twin's overrides: graded in place and fresh from the patch."""
    row_in = instance["row"]
    with _command(attack, tmp_path, SWEBENCH_ATTACKS, _honest(row_in), row_in["patch"]) as command:
        row = _run(tmp_path, command, [*PODMAN, *STRICT_OVERRIDES], "", benchmark=instance["benchmark"])
    assert (row["agent_network"], row["grading_mode"]) == ("no-network", "both")
    _check(row, attack, "podman", record, grader="swebench (strict)")
