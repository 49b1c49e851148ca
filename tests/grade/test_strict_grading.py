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


@pytest.mark.parametrize("flags, strict, expected", [
    (["test_config@patch"], True, "unresolved"),  # a conftest.py in the patch: SWE-bench's hole
    (["import_hook@patch"], True, "unresolved"),  # a .pth / sitecustomize.py the patch adds
    (["test_config@patch"], False, "resolved"),  # standard: flagged, out of the clean score only
    (["test_config@3"], True, "resolved"),  # written by a tool call but not in the graded patch
    (["test_edit@patch", "git_history@2"], True, "resolved"),
])
def test_strict_fails_a_patch_that_carries_a_start_up_hook_or_test_configuration(
        flags: list[str], strict: bool, expected: str) -> None:
    from farm.config.schema import STRICT_OVERRIDES
    from farm.grade.attempt import strict_status

    cfg = load_config(list(STRICT_OVERRIDES) if strict else [])
    assert strict_status("resolved", flags, cfg) == expected
    assert strict_status("unresolved", flags, cfg) == "unresolved"
