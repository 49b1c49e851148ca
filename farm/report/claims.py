"""Registry of published numbers (conf/claims/*.yaml) that runs are compared against.

The files are data that users extend; the loader validates every field and names the file and
the dotted field path on error, because a typo in a claim silently turns into "no claim".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from farm.errors import ConfigError

DEFAULT_CLAIMS_DIR = Path(__file__).resolve().parents[2] / "conf" / "claims"

_MODEL_KEYS = {"vendor", "aliases", "harness", "claims", "parallel_tool_call_rate", "ladder", "notes", "hub_id", "base"}
_CLAIM_KEYS = {"value", "metric", "unit", "source", "notes"}
_LADDER_KEYS = {"benchmark", "metric", "source", "notes", "points"}
_POINT_KEYS = {"label", "value", "model"}
_BENCH_KEYS = {"tasks", "aliases", "source", "revision", "subpath", "file", "notes"}


def normalise(name: str) -> str:
    """Compare names loosely: case, '-', '.', '/' and spaces do not matter."""
    return re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")


@dataclass(frozen=True)
class Claim:
    model: str
    benchmark: str
    value: float
    metric: str
    source: str
    unit: str = "pct"
    notes: str = ""
    file: str = ""

    @property
    def k(self) -> int | None:
        """k of an avg@k / pass@k metric, else None."""
        m = re.fullmatch(r"(?:avg|pass)@(\d+)", self.metric.strip().lower())
        return int(m.group(1)) if m else None


@dataclass(frozen=True)
class LadderPoint:
    label: str
    value: float
    model: str | None = None


@dataclass(frozen=True)
class Ladder:
    model: str
    name: str
    benchmark: str
    metric: str
    source: str
    points: tuple[LadderPoint, ...]
    notes: str = ""


@dataclass
class ClaimsRegistry:
    claims: list[Claim] = field(default_factory=list)
    ladders: list[Ladder] = field(default_factory=list)
    parallel_rates: dict[str, Claim] = field(default_factory=dict)
    model_aliases: dict[str, str] = field(default_factory=dict)  # normalised alias -> key
    bench_aliases: dict[str, str] = field(default_factory=dict)
    benchmarks: dict[str, dict[str, Any]] = field(default_factory=dict)

    def model_key(self, name: str | None) -> str | None:
        return self.model_aliases.get(normalise(name)) if name else None

    def benchmark_key(self, name: str) -> str:
        return self.bench_aliases.get(normalise(name), normalise(name))

    def claim_for(self, model: str | None, benchmark: str) -> Claim | None:
        key = self.model_key(model)
        bench = self.benchmark_key(benchmark)
        for c in self.claims:
            if c.model == key and c.benchmark == bench:
                return c
        return None

    def claims_for_model(self, model: str | None) -> list[Claim]:
        key = self.model_key(model)
        return [c for c in self.claims if c.model == key]


def _fail(file: Path, where: str, message: str) -> ConfigError:
    return ConfigError(f"{file}: {where}: {message}")


def _mapping(file: Path, where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(file, where, f"expected a mapping, got {type(value).__name__} {value!r}")
    return value


def _keys(file: Path, where: str, value: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise _fail(file, f"{where}.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(allowed))})")


def _number(file: Path, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(file, where, f"expected a number, got {value!r}")
    return float(value)


def _text(file: Path, where: str, value: Any, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise _fail(file, where, f"expected a non-empty string, got {value!r}")
    return value


def _aliases(file: Path, where: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise _fail(file, where, f"expected a list of strings, got {value!r}")
    return value


def _claim(file: Path, where: str, model: str, bench: str, raw: Any) -> Claim:
    raw = _mapping(file, where, raw)
    _keys(file, where, raw, _CLAIM_KEYS)
    for required in ("value", "metric", "source"):
        if required not in raw:
            raise _fail(file, f"{where}.{required}", "missing")
    return Claim(
        model=model,
        benchmark=bench,
        value=_number(file, f"{where}.value", raw["value"]),
        metric=_text(file, f"{where}.metric", raw["metric"]),
        source=_text(file, f"{where}.source", raw["source"]),
        unit=_text(file, f"{where}.unit", raw.get("unit"), required=False) or "pct",
        notes=_text(file, f"{where}.notes", raw.get("notes"), required=False),
        file=str(file),
    )


def _ladder(file: Path, where: str, model: str, name: str, raw: Any, reg: ClaimsRegistry) -> Ladder:
    raw = _mapping(file, where, raw)
    _keys(file, where, raw, _LADDER_KEYS)
    for required in ("benchmark", "metric", "source", "points"):
        if required not in raw:
            raise _fail(file, f"{where}.{required}", "missing")
    points_raw = raw["points"]
    if not isinstance(points_raw, list) or not points_raw:
        raise _fail(file, f"{where}.points", f"expected a non-empty list, got {points_raw!r}")
    points = []
    for i, p in enumerate(points_raw):
        pw = f"{where}.points[{i}]"
        p = _mapping(file, pw, p)
        _keys(file, pw, p, _POINT_KEYS)
        if "label" not in p or "value" not in p:
            raise _fail(file, f"{pw}.{'label' if 'label' not in p else 'value'}", "missing")
        points.append(
            LadderPoint(
                label=str(p["label"]),
                value=_number(file, f"{pw}.value", p["value"]),
                model=_text(file, f"{pw}.model", p.get("model"), required=False) or None,
            )
        )
    return Ladder(
        model=model,
        name=name,
        benchmark=reg.benchmark_key(_text(file, f"{where}.benchmark", raw["benchmark"])),
        metric=_text(file, f"{where}.metric", raw["metric"]),
        source=_text(file, f"{where}.source", raw["source"]),
        notes=_text(file, f"{where}.notes", raw.get("notes"), required=False),
        points=tuple(points),
    )


def _read(file: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(file.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: not valid YAML: {e}") from None
    if doc is None:
        return {}
    doc = _mapping(file, "<top>", doc)
    _keys(file, "<top>", doc, {"models", "benchmarks"})
    return doc


def _load_benchmarks(file: Path, doc: dict[str, Any], reg: ClaimsRegistry) -> None:
    for bench, raw in _mapping(file, "benchmarks", doc.get("benchmarks") or {}).items():
        where = f"benchmarks.{bench}"
        raw = _mapping(file, where, raw or {})
        _keys(file, where, raw, _BENCH_KEYS)
        key = bench
        if normalise(bench) in reg.bench_aliases:
            raise _fail(file, where, "benchmark defined twice")
        if "tasks" in raw and (not isinstance(raw["tasks"], int) or raw["tasks"] <= 0):
            raise _fail(file, f"{where}.tasks", f"expected a positive integer, got {raw['tasks']!r}")
        reg.benchmarks[key] = raw
        for alias in [bench, *_aliases(file, f"{where}.aliases", raw.get("aliases"))]:
            reg.bench_aliases[normalise(alias)] = key


def _load_models(file: Path, doc: dict[str, Any], reg: ClaimsRegistry, seen_models: dict[str, Path]) -> None:
    for model, raw in _mapping(file, "models", doc.get("models") or {}).items():
        where = f"models.{model}"
        raw = _mapping(file, where, raw or {})
        _keys(file, where, raw, _MODEL_KEYS)
        key = model
        if normalise(model) in seen_models:
            raise _fail(file, where, f"model already defined in {seen_models[normalise(model)]}")
        seen_models[normalise(model)] = file
        for alias in [model, *_aliases(file, f"{where}.aliases", raw.get("aliases"))]:
            reg.model_aliases[normalise(alias)] = key
        for bench, c in _mapping(file, f"{where}.claims", raw.get("claims") or {}).items():
            reg.claims.append(_claim(file, f"{where}.claims.{bench}", key, reg.benchmark_key(bench), c))
        if raw.get("parallel_tool_call_rate") is not None:
            reg.parallel_rates[key] = _claim(
                file, f"{where}.parallel_tool_call_rate", key, "*", raw["parallel_tool_call_rate"]
            )
        for name, lad in _mapping(file, f"{where}.ladder", raw.get("ladder") or {}).items():
            reg.ladders.append(_ladder(file, f"{where}.ladder.{name}", key, name, lad, reg))


def load_claims(claims_dir: Path | str | None = None) -> ClaimsRegistry:
    """Load and merge every *.yaml / *.yml file of ``claims_dir`` (default: conf/claims)."""
    directory = Path(claims_dir) if claims_dir is not None else DEFAULT_CLAIMS_DIR
    reg = ClaimsRegistry()
    if claims_dir is None and not directory.is_dir():
        return reg  # installed without conf/: no claims, not an error
    if not directory.is_dir():
        raise ConfigError(f"report.claims_dir: {directory} is not a directory")
    seen: dict[str, Path] = {}
    files = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    docs = [(file, _read(file)) for file in files]
    # Benchmarks of every file first: claims and ladders may name a benchmark by an alias
    # that another file defines.
    for file, doc in docs:
        _load_benchmarks(file, doc, reg)
    for file, doc in docs:
        _load_models(file, doc, reg, seen)
    return reg
