"""load_config and apply_overrides apply overrides by one path (farm/config/load.py ``_overlay``)
but word what they cannot apply each their own way; these are the exact texts users see."""

from __future__ import annotations

import pytest

from farm.config import apply_overrides, conf_dir, load_config
from farm.errors import ConfigError


def message(fn, *args) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args)
    return str(info.value)


def test_the_command_line_wording() -> None:
    assert message(load_config, ["run.nope=1"]) == "unknown config key 'run.nope' (in override 'run.nope=1')"
    assert message(load_config, ["run.seeds=three"]) == (
        "invalid value 'three' for 'run.seeds': Value 'three' of type 'str' could not be converted to Integer")
    assert message(load_config, ["run.seeds=[1,"]) == "cannot parse override 'run.seeds=[1,'"
    assert message(load_config, ["nonsense"]) == "override 'nonsense' must look like key=value"
    names = sorted(p.stem for p in (conf_dir() / "experiment").glob("*.yaml"))
    assert message(load_config, ["experiment=nope"]) == (
        f"unknown experiment 'nope': choose one of {names} (files in {conf_dir() / 'experiment'})")


def test_the_arm_override_wording() -> None:
    cfg = load_config([])
    assert message(apply_overrides, cfg, ["run.nope=1"]) == "arm override: unknown key or bad value '1' for 'run.nope'"
    assert message(apply_overrides, cfg, ["run.seeds=three"]) == (
        "arm override: unknown key or bad value 'three' for 'run.seeds'")
    assert message(apply_overrides, cfg, ["nonsense"]) == "override 'nonsense' must look like key=value"
    names = sorted(p.stem for p in (conf_dir() / "experiment").glob("*.yaml"))
    assert message(apply_overrides, cfg, ["experiment=nope"]) == (
        f"arm override: unknown experiment 'nope': choose one of {names}")


def test_both_paths_validate_the_result_alike() -> None:
    cfg = load_config([])
    for override in ("run.seeds=0", "agent.tool_execution=parallel", "agent=leaf"):
        assert message(load_config, [override]) == message(apply_overrides, cfg, [override])
