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

Strict twins:

``experiment.strict_pair=true`` runs every arm twice: as configured (*standard*: the vendor's
settings) and as ``<arm>-strict``, whose overrides are the arm's followed by
``experiment.strict_overrides`` (no agent egress, history stripped, fresh grading wherever a
patch is the answer, a tamper suspect fails). The strict overrides are applied again after
the per-benchmark budgets and the arm's ``last_overrides``, so no budget can undo them. The
twins are not entries of ``experiment.arms`` (a twin's overrides are not limited to
``agent.*`` / ``model.*`` as ``last_overrides`` are); they exist only here. An arm with
``strict: false`` gets no twin (a sensitivity arm whose question is not about leakage).

Arms on some benchmarks only:

An arm's ``benchmarks`` (names as in ``experiment.benchmarks``; empty: all of them) limits the
benchmarks it has trials on, e.g. a Terminal-Bench timeout arm in a four-benchmark experiment;
its strict twin follows it. ``runs_on`` is the one rule: the run's trial plan, `farm validate
--show` and `farm plan` (from a pilot's config) all ask it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from farm.config.benchmarks import same_benchmark
from farm.config.checks import require_endpoint
from farm.config.load import apply_overrides
from farm.config.schema import ArmConfig, FarmConfig, value_at
from farm.errors import ConfigError

# what `farm validate --show` prints per arm and benchmark: (column, config key)
BUDGET_KEYS = (
    ("max_steps", "agent.max_steps"),
    ("max_context_tokens", "agent.max_context_tokens"),
    ("max_total_time_s", "agent.max_total_time_s"),
    ("timeout_multiplier", "agent.timeout_multiplier"),
    ("max_tokens_per_turn", "model.max_tokens_per_turn"),
    ("max_retries", "model.max_retries"),
    ("timeout_s", "model.timeout_s"),
    ("temperature", "model.temperature"),
    ("parallel_tool_calls", "model.parallel_tool_calls"),
    ("extra_body", "model.extra_body"),
    ("seeds", "run.seeds"),
    ("max_attempts", "run.max_attempts"),
)


STRICT_SUFFIX = "-strict"


def _declared(cfg: FarmConfig) -> list[ArmConfig]:
    """The experiment's own arms: ``base`` (no overrides) when it names none."""
    return list(cfg.experiment.arms) or [ArmConfig(name="base")]


def arms_of(cfg: FarmConfig) -> list[tuple[str, FarmConfig]]:
    """(name, config) of every arm: ``base`` alone when the experiment names no arms; with
    ``experiment.strict_pair`` each arm followed by its ``<arm>-strict`` twin.

    Raises:
        ConfigError: a twin's name is already an arm's, or a strict override does not apply.
    """
    declared = _declared(cfg)
    if not cfg.experiment.arms and not cfg.experiment.strict_pair:
        return [("base", cfg)]
    out: list[tuple[str, FarmConfig]] = []
    names = {a.name for a in declared}
    for a in declared:
        out.append((a.name, apply_overrides(cfg, list(a.overrides)) if cfg.experiment.arms else cfg))
        if cfg.experiment.strict_pair and a.strict:
            twin = a.name + STRICT_SUFFIX
            if twin in names:
                raise ConfigError(f"invalid value {twin!r} for 'experiment.arms': with experiment.strict_pair=true "
                                  f"{twin!r} is the strict twin of arm {a.name!r}; rename the arm")
            out.append((twin, apply_overrides(cfg, [*a.overrides, *cfg.experiment.strict_overrides])))
    return out


def strict_twin_of(arm_cfg: FarmConfig, arm: str) -> str | None:
    """The standard arm whose strict twin ``arm`` is, or None when ``arm`` is not a twin."""
    if not arm_cfg.experiment.strict_pair or not arm.endswith(STRICT_SUFFIX):
        return None
    names = {a.name for a in _declared(arm_cfg) if a.strict}
    base = arm[: -len(STRICT_SUFFIX)]
    return base if base in names and arm not in {a.name for a in _declared(arm_cfg)} else None


def runs_on(arm_cfg: FarmConfig, arm: str, benchmark: str) -> bool:
    """Whether arm ``arm`` (declared, or a strict twin: its standard arm's) has trials on
    ``benchmark`` (a task's or the config's spelling of a benchmark name)."""
    base = strict_twin_of(arm_cfg, arm)
    own = next((a for a in arm_cfg.experiment.arms if a.name == (base or arm)), None)
    return own is None or not own.benchmarks or any(same_benchmark(b, benchmark) for b in own.benchmarks)


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
    """The overrides that turn arm ``arm``'s config into its config on ``benchmark``: the
    per-benchmark budget, the arm's ``last_overrides``, and for a strict twin its standard arm's
    ``last_overrides`` then the strict overrides (last, so that no budget undoes them)."""
    base = strict_twin_of(arm_cfg, arm)
    own = base if base is not None else arm
    last = next((list(a.last_overrides) for a in arm_cfg.experiment.arms if a.name == own), [])
    per = [o for key, items in arm_cfg.experiment.per_benchmark.items() if same_benchmark(key, benchmark)
           for o in items]
    strict = list(arm_cfg.experiment.strict_overrides) if base is not None and (per or last) else []
    return [*per, *last, *strict]


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
    """The resolved budget of every arm on every benchmark it runs on, as `farm validate --show`
    prints it."""
    rows = []
    for arm, acfg in arms:
        for bench in benchmarks or [acfg.benchmark.name]:
            if not runs_on(acfg, arm, bench):
                continue
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
