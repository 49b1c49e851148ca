"""grade.mode=patch_both and the network overrides of the strict twin (farm/grade/attempt.py,
farm/tasks/model.py with_networks)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from farm.config import load_config
from farm.grade.attempt import grading_mode
from farm.tasks.model import with_networks
from tests.support.tasks import make_task


@pytest.mark.parametrize("mode, patch_graded, expected", [
    ("patch_both", True, "both"),  # the answer is the patch: re-graded fresh from it
    ("patch_both", False, "in_place"),  # container state (Terminal-Bench): nothing to re-grade from
    ("both", False, "both"),
    ("in_place", True, "in_place"),
])
def test_patch_both_grades_fresh_too_only_where_the_answer_is_a_patch(mode: str, patch_graded: bool,
                                                                       expected: str) -> None:
    task = replace(make_task(network="no-network"), require_git_patch=patch_graded)
    assert grading_mode(task, load_config([f"grade.mode={mode}"]), None) == expected


def test_with_networks_replaces_only_what_is_set() -> None:
    task = make_task(network="no-network")
    assert with_networks(task, None, None) is task
    opened = with_networks(task, "public", None)
    assert (opened.agent_network, opened.verifier_network) == ("public", "no-network")
    both = with_networks(replace(task, agent_network="public", verifier_network="public"), "no-network", "no-network")
    assert (both.agent_network, both.verifier_network) == ("no-network", "no-network")
