"""farm's reproduction experiment runs the vendor's published Leaf settings (bundled presets)."""

from __future__ import annotations

import re

import pytest
import yaml

from farm.config import load_config
from farm.tasks.catalog import get_source
from tests.shared import BUNDLED

PRESETS = BUNDLED / "leaf" / "presets"
# current in the vendor's newest tree (tests/fixtures/leaf/MANIFEST.md); the bundled swebench-verified.yaml is
# an old one-task version, and patch-eval.yaml / terminal-bench-2.yaml were removed upstream
CURRENT = ("swebench-pro.yaml", "terminal-bench-2-verified.yaml", "patch-eval-verified.yaml")


def _env_default(value: str | int) -> int:
    """``${FROGNANO_MAX_WORKERS:-150}`` -> 150: the value the preset runs with when unset."""
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\$\{\w+:-(\d+)\}", value)
    assert match, value
    return int(match.group(1))


@pytest.mark.parametrize("model", ["frognano-4b", "qwen3.5-4b"])
@pytest.mark.parametrize("preset", CURRENT)
def test_reproduction_runs_the_vendor_preset(preset: str, model: str) -> None:
    vendor = yaml.safe_load((PRESETS / preset).read_text())
    cfg = load_config(["experiment=reproduce-frognano", f"model={model}", "model.base_url=http://127.0.0.1:9/v1"])
    assert get_source(vendor["dataset"]).name in cfg.experiment.benchmarks
    assert cfg.agent.max_steps == vendor["max_steps"]
    assert cfg.agent.max_context_tokens == vendor["max_context_tokens"]
    assert cfg.agent.max_total_time_s == vendor["max_total_time_sec"]
    assert (cfg.run.seeds, cfg.run.max_attempts) == (vendor["seeds_per_task"], vendor["max_attempts"])
    assert cfg.run.max_in_flight == _env_default(vendor["max_workers"])
    sampling = vendor["model"]
    assert cfg.model.temperature == sampling["temperature"]
    assert cfg.model.parallel_tool_calls is sampling["parallel_tool_calls"]
    body = dict(cfg.model.extra_body)
    for key, value in sampling["extra_body"].items():
        assert body.get(key) == value, key
