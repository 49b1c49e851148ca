"""agent.timeout_multiplier: hashed only when set away from 1, refused when not > 0, shown per arm."""

from __future__ import annotations

import pytest

from farm.cli import main
from farm.config import load_config
from farm.config.load import config_hash
from farm.errors import ConfigError


def test_the_default_keeps_the_hash_and_another_factor_moves_it() -> None:
    base = config_hash(load_config([]))
    assert config_hash(load_config(["agent.timeout_multiplier=1"])) == base
    assert config_hash(load_config(["agent.timeout_multiplier=4"])) != base


@pytest.mark.parametrize("value", ["0", "-2"])
def test_a_factor_that_is_not_positive_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError, match=r"agent\.timeout_multiplier.*must be > 0"):
        load_config([f"agent.timeout_multiplier={value}"])


def test_validate_show_lists_both_arms_of_the_tb2_pair_with_their_factor(capsys) -> None:
    url = "model.base_url=http://127.0.0.1:9/v1"
    assert main(["validate", "experiment=tb2-timeouts", "model=frognano-4b", url, "--show"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "/ terminal_bench_2_verified:" in line]
    assert [line.split(" / ")[0].strip() for line in lines] == ["timeouts-1x", "timeouts-4x"]
    assert "max_total_time_s=None timeout_multiplier=1.0 " in lines[0]
    assert "timeout_multiplier=4.0 " in lines[1] and "max_tokens_per_turn=32000 " in lines[1]
