from __future__ import annotations

import pytest

from farm.grade.harbor import RewardError, parse_reward


@pytest.mark.parametrize(
    "json_text, txt_text, expected",
    [
        ("1", None, 1.0),
        ('{"reward": 0.5}', None, 0.5),
        ('{"score": 1}', None, 1.0),  # a one-key object: its value
        (None, "1\n", 1.0),
        (None, "0", 0.0),
        ('{"reward": 1}', "0", 1.0),  # reward.json wins
    ],
)
def test_valid_rewards(json_text, txt_text, expected):
    assert parse_reward(json_text, txt_text) == expected


@pytest.mark.parametrize(
    "json_text, txt_text, needle",
    [
        (None, None, "neither"),
        (None, "   ", "empty"),
        (None, "passed", "does not hold a number"),
        ("{bad", None, "not JSON"),
        ('{"a": 1, "b": 2}', None, "several keys"),
        ('"1"', None, "not a number"),
        ("NaN", None, "not finite"),
        (None, "-1", "negative"),
    ],
)
def test_invalid_rewards_are_errors_not_zero(json_text, txt_text, needle):
    with pytest.raises(RewardError, match=needle):
        parse_reward(json_text, txt_text)
