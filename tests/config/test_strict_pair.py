"""experiment.strict_pair: every arm gets an <arm>-strict twin (farm/config/arms.py), the new keys
are validated, and they leave every existing config hash where it was unless set."""

from __future__ import annotations

import pytest

from farm.config import config_hash, load_config
from farm.config.arms import STRICT_SUFFIX, arms_of, for_benchmark, strict_twin_of, trial_overrides
from farm.config.schema import STRICT_OVERRIDES
from farm.errors import ConfigError

URL = "model.base_url=http://127.0.0.1:9/v1"


def test_each_arm_is_followed_by_its_strict_twin_with_the_strict_overrides() -> None:
    cfg = load_config(["experiment=reproduce-frognano", URL])
    names = [n for n, _ in arms_of(cfg)]
    assert names == ["frognano-4b", "frognano-4b-strict", "qwen3.5-4b", "qwen3.5-4b-strict",
                     "frognano-4b-card", "frognano-4b-card-strict", "frognano-4b-sglang", "frognano-4b-sglang-strict",
                     # strict: false, so no twin: the timeout arm asks about speed, not leakage
                     "frognano-4b-timeouts-4x"]
    assert strict_twin_of(dict(arms_of(cfg))["frognano-4b-timeouts-4x"], "frognano-4b-timeouts-4x-strict") is None
    arms = dict(arms_of(cfg))
    std, strict = arms["qwen3.5-4b"], arms["qwen3.5-4b-strict"]
    assert strict.model.name == std.model.name == "qwen3.5-4b"  # the arm's own overrides first
    assert (std.benchmark.agent_network, std.grade.mode, std.grade.tamper_fails, std.benchmark.strip_history) \
        == (None, "in_place", False, None)
    assert (strict.benchmark.agent_network, strict.benchmark.verifier_network, strict.grade.mode,
            strict.grade.tamper_fails, strict.benchmark.strip_history) == ("no-network", "no-network", "patch_both",
                                                                           True, True)
    assert strict_twin_of(strict, "qwen3.5-4b-strict") == "qwen3.5-4b"
    assert strict_twin_of(std, "qwen3.5-4b") is None


def test_a_twin_keeps_its_arms_budgets_and_the_strict_overrides_come_last() -> None:
    # a strict override on model.* is re-applied after per_benchmark and the arm's last_overrides
    cfg = load_config(["experiment=reproduce-frognano", URL,
                       "experiment.strict_overrides=[benchmark.agent_network=no-network,model.max_retries=0]"])
    arms = dict(arms_of(cfg))
    card = for_benchmark(arms["frognano-4b-card-strict"], "frognano-4b-card-strict", "swebench_pro")
    assert card.model.max_tokens_per_turn == 8192  # the card arm's last_overrides still hold
    assert card.model.max_retries == 0  # per_benchmark says 2 on SWE-bench Pro; strict comes after it
    assert trial_overrides(arms["frognano-4b-card-strict"], "frognano-4b-card-strict", "swebench_pro") == [
        "model.max_tokens_per_turn=32000", "model.max_retries=2", "model.max_tokens_per_turn=8192",
        "benchmark.agent_network=no-network", "model.max_retries=0"]
    std = for_benchmark(arms["frognano-4b"], "frognano-4b", "swebench_pro")
    assert (std.model.max_retries, std.benchmark.agent_network) == (2, None)


def test_a_run_without_arms_pairs_base_with_base_strict() -> None:
    cfg = load_config(["experiment.strict_pair=true"])
    (base, twin) = arms_of(cfg)
    assert (base[0], twin[0]) == ("base", "base" + STRICT_SUFFIX)
    assert base[1] is cfg and twin[1].grade.mode == "patch_both"
    assert [n for n, _ in arms_of(load_config([]))] == ["base"]


def test_an_arm_named_like_a_twin_is_refused() -> None:
    cfg = load_config(["experiment.strict_pair=true",
                       "experiment.arms=[{name: a, overrides: []}, {name: a-strict, overrides: []}]"])
    with pytest.raises(ConfigError, match="'a-strict' is the strict twin of arm 'a'"):
        arms_of(cfg)


@pytest.mark.parametrize("override, key", [
    ("benchmark.agent_network=internet", "benchmark.agent_network"),
    ("benchmark.verifier_network=open", "benchmark.verifier_network"),
    ("grade.mode=strict", "grade.mode"),
])
def test_bad_values_are_refused_naming_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=f"'{key}'"):
        load_config([override])


def test_the_new_keys_move_no_hash_at_their_defaults_and_do_when_set() -> None:
    base = config_hash(load_config([]))
    defaults = ["benchmark.agent_network=null", "benchmark.verifier_network=null", "grade.tamper_fails=false",
                "experiment.strict_pair=false", f"experiment.strict_overrides=[{','.join(STRICT_OVERRIDES)}]"]
    assert config_hash(load_config(defaults)) == base
    for changed in ("benchmark.agent_network=no-network", "benchmark.verifier_network=public",
                    "grade.tamper_fails=true", "grade.mode=patch_both", "experiment.strict_pair=true",
                    "experiment.strict_overrides=[grade.mode=fresh]"):
        assert config_hash(load_config([changed])) != base, changed
