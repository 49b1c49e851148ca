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
        ('{"reward": 0.5, "detail": 1}', None, 0.5),  # "reward" wins among several keys
        ("0.75", None, 0.75),
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


def test_reward_error_messages_are_exact():
    def msg(j, t):
        with pytest.raises(RewardError) as e:
            parse_reward(j, t)
        return str(e.value)

    assert msg(None, None) == "the verifier wrote neither /logs/verifier/reward.json nor reward.txt"
    assert msg(None, " \n") == "reward.txt is empty"
    long = "x" * 100
    assert msg(None, long) == f"reward.txt does not hold a number: {'x' * 80!r}"
    assert msg('{"a": 1, "b": 2}', None) == "reward.json has several keys and no 'reward': ['a', 'b']"
    assert msg("true", None) == "reward.json value True is not a number"
    assert msg("[1]", None) == "reward.json value [1] is not a number"
    assert msg(None, "inf") == "reward inf is not finite"
    assert msg(None, "-0.5") == "reward -0.5 is negative"
    assert msg("{", None).startswith("reward.json is not JSON: ")
