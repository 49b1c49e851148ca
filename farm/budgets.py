"""Per-benchmark budgets: the config one arm's trials on one benchmark run with.

The vendor's presets give each benchmark its own agent/model budget (tokens per turn, SDK
retries, ...), so a run of several benchmarks cannot use one model preset for all of them.
``experiment.per_benchmark[<benchmark>]`` lists ``agent.*`` / ``model.*`` overrides applied on
top of each arm's config for that benchmark's trials; an arm's ``last_overrides`` come after
them (an arm that holds one budget fixed everywhere, e.g. the model card's 8,192 tokens per
turn beside the presets' budgets).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from farm.config import FarmConfig, apply_overrides
from farm.errors import ConfigError
from farm.tasks.catalog import source_key

# what `farm validate --show` prints per arm and benchmark: (column, config key)
BUDGET_KEYS = (
    ("max_steps", "agent.max_steps"),
    ("max_context_tokens", "agent.max_context_tokens"),
    ("max_total_time_s", "agent.max_total_time_s"),
    ("max_tokens_per_turn", "model.max_tokens_per_turn"),
    ("max_retries", "model.max_retries"),
    ("timeout_s", "model.timeout_s"),
    ("temperature", "model.temperature"),
    ("parallel_tool_calls", "model.parallel_tool_calls"),
    ("extra_body", "model.extra_body"),
    ("seeds", "run.seeds"),
    ("max_attempts", "run.max_attempts"),
)


def same_benchmark(a: str, b: str) -> bool:
    """``swebench-pro`` in the config and ``swebench_pro`` on a task are one benchmark."""
    return a == b or (source_key(a) is not None and source_key(a) == source_key(b))


def trial_overrides(arm_cfg: FarmConfig, arm: str, benchmark: str) -> list[str]:
    """The overrides that turn arm ``arm``'s config into its config on ``benchmark``."""
    last = next((a.last_overrides for a in arm_cfg.experiment.arms if a.name == arm), [])
    per = [o for key, items in arm_cfg.experiment.per_benchmark.items() if same_benchmark(key, benchmark)
           for o in items]
    return [*per, *last]


def for_benchmark(arm_cfg: FarmConfig, arm: str, benchmark: str) -> FarmConfig:
    """Arm ``arm``'s config for its trials on ``benchmark`` (the arm's own when nothing differs)."""
    overrides = trial_overrides(arm_cfg, arm, benchmark)
    return apply_overrides(arm_cfg, overrides) if overrides else arm_cfg


class Resolver:
    """``for_benchmark`` once per (arm, benchmark) of a run."""

    def __init__(self, arms: dict[str, FarmConfig]) -> None:
        self.arms = arms
        self._cache: dict[tuple[str, str], FarmConfig] = {}

    def __call__(self, arm: str, benchmark: str) -> FarmConfig:
        key = (arm, benchmark)
        if key not in self._cache:
            self._cache[key] = for_benchmark(self.arms[arm], arm, benchmark)
        return self._cache[key]


@dataclass
class BudgetRow:
    arm: str
    benchmark: str
    values: dict[str, Any]


def _get(cfg: FarmConfig, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def budget_rows(arms: list[tuple[str, FarmConfig]], benchmarks: list[str]) -> list[BudgetRow]:
    """The resolved budget of every arm on every benchmark, as `farm validate --show` prints it."""
    rows = []
    for arm, acfg in arms:
        for bench in benchmarks or [acfg.benchmark.name]:
            cfg = for_benchmark(acfg, arm, bench)
            rows.append(BudgetRow(arm, bench, {col: _get(cfg, key) for col, key in BUDGET_KEYS}))
    return rows


def render_budgets(rows: list[BudgetRow]) -> str:
    """One line per arm and benchmark: ``arm / benchmark: key=value ...`` (the sampling last)."""
    lines = ["per-benchmark budgets (arm / benchmark):"]
    for row in rows:
        shown = " ".join(f"{k}={v}" for k, v in row.values.items() if k != "extra_body")
        lines.append(f"  {row.arm} / {row.benchmark}: {shown} extra_body={row.values['extra_body']}")
    return "\n".join(lines)


def check_per_trial(cfg: FarmConfig) -> None:
    """Raises ConfigError for a per-benchmark / last override that is not ``agent.*`` / ``model.*``:
    one run plans one set of seeds and attempts, so only the agent and the model may vary."""
    exp = cfg.experiment
    per_trial = [(f"experiment.per_benchmark.{b}", o) for b, items in exp.per_benchmark.items() for o in items]
    per_trial += [(f"experiment.arms[{a.name}].last_overrides", o) for a in exp.arms for o in a.last_overrides]
    known = exp.benchmarks or [cfg.benchmark.name]
    for bench in exp.per_benchmark:
        # a typo would silently leave that benchmark on the arm's budget
        if not any(same_benchmark(bench, k) for k in known):
            raise ConfigError(f"invalid key {bench!r} in 'experiment.per_benchmark': "
                              f"the run's benchmarks are {known}")
    for where, item in per_trial:
        if not item.startswith(("agent.", "model.")) or "=" not in item:
            raise ConfigError(f"invalid value {item!r} in '{where}': only agent.<key>=<value> / model.<key>=<value>")
