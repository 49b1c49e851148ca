"""An experiment's arms and their per-benchmark budgets: the config each trial runs with.

``arms_of`` turns the run's config into one config per arm (``experiment.arms[].overrides`` on
top of the run's); the driver, `farm validate --show` and the report's config diff all start
from it.

Per-benchmark budgets:

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

from farm.config.benchmarks import same_benchmark
from farm.config.checks import require_endpoint
from farm.config.load import apply_overrides
from farm.config.schema import FarmConfig, value_at
from farm.errors import ConfigError

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


def arms_of(cfg: FarmConfig) -> list[tuple[str, FarmConfig]]:
    """(name, config) of every arm: ``base`` alone when the experiment names no arms."""
    if not cfg.experiment.arms:
        return [("base", cfg)]
    return [(a.name, apply_overrides(cfg, list(a.overrides))) for a in cfg.experiment.arms]


def require_arm_endpoints(cfg: FarmConfig, arms: list[tuple[str, FarmConfig]]) -> None:
    """``require_endpoint`` for every arm, the error naming the arm when the experiment has arms.

    Raises:
        ConfigError: the first arm without an endpoint.
    """
    for name, acfg in arms:
        try:
            require_endpoint(acfg)
        except ConfigError as exc:
            raise ConfigError(f"arm {name!r}: {exc}" if cfg.experiment.arms else str(exc)) from None


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


def budget_rows(arms: list[tuple[str, FarmConfig]], benchmarks: list[str]) -> list[BudgetRow]:
    """The resolved budget of every arm on every benchmark, as `farm validate --show` prints it."""
    rows = []
    for arm, acfg in arms:
        for bench in benchmarks or [acfg.benchmark.name]:
            cfg = for_benchmark(acfg, arm, bench)
            rows.append(BudgetRow(arm, bench, {col: value_at(cfg, key) for col, key in BUDGET_KEYS}))
    return rows


def render_budgets(rows: list[BudgetRow]) -> str:
    """One line per arm and benchmark: ``arm / benchmark: key=value ...`` (the sampling last)."""
    lines = ["per-benchmark budgets (arm / benchmark):"]
    for row in rows:
        shown = " ".join(f"{k}={v}" for k, v in row.values.items() if k != "extra_body")
        lines.append(f"  {row.arm} / {row.benchmark}: {shown} extra_body={row.values['extra_body']}")
    return "\n".join(lines)


# How each arm's model is served, as `farm validate --show` prints it: the engine's own key for
# each setting (vLLM's and SGLang's names differ; farm/serve/sglang.py).
ENGINE_KEYS = {
    "vllm": {"prefix_caching": "enable_prefix_caching", "token_details": "enable_prompt_tokens_details"},
    "sglang": {"radix_cache_off": "disable_radix_cache", "token_details": "enable_cache_report",
               "mamba_cache": "mamba_radix_cache_strategy"},
}


def serving_row(cfg: FarmConfig) -> dict[str, Any]:
    """Model, revision, engine, parsers and cache settings of one arm's model."""
    s = cfg.model.serving
    ek = s.engine_kwargs
    keys = ENGINE_KEYS.get(s.engine, {})
    # a revision pin field may live on serving or in engine_kwargs (both engines take `revision`)
    revision = getattr(s, "revision", None) or ek.get("revision") or "unpinned"
    row: dict[str, Any] = {
        "model": cfg.model.name, "source": s.source, "revision": revision, "engine": s.engine,
        "tool_call_parser": ek.get("tool_call_parser"), "reasoning_parser": ek.get("reasoning_parser"),
    }
    if s.engine == "sglang":
        row["prefix_caching"] = not ek.get(keys["radix_cache_off"], False)
        row["mamba_cache"] = ek.get(keys["mamba_cache"], "auto")
    else:
        row["prefix_caching"] = ek.get(keys.get("prefix_caching", ""), "engine default")
    row["token_details"] = bool(ek.get(keys.get("token_details", ""), False))
    row["router"] = s.router
    return row


def render_serving(arms: list[tuple[str, FarmConfig]]) -> str:
    """One line per arm: ``arm: model=... engine=... tool_call_parser=... prefix_caching=...``."""
    lines = ["serving (per arm):"]
    for arm, acfg in arms:
        lines.append(f"  {arm}: " + " ".join(f"{k}={v}" for k, v in serving_row(acfg).items()))
    return "\n".join(lines)
