"""How a report table is laid out: raw rows (for CSV) and display columns (Markdown / HTML)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def fmt_share(value: float) -> str:
    """A 0–1 share as a whole percentage; – when unknown."""
    return "–" if math.isnan(value) else f"{100 * value:.0f} %"


def fmt_ci(lo: float, hi: float) -> str:
    return "–" if math.isnan(lo) or math.isnan(hi) else f"[{lo:.1f}, {hi:.1f}]"


Column = tuple[str, Callable[[dict[str, Any]], str]]


@dataclass
class Table:
    name: str  # CSV file stem
    title: str
    rows: list[dict[str, Any]]
    display: list[Column]
    note: str = ""


def trace_columns() -> list[Column]:
    """The run id and config hash every displayed row ends with."""
    return [("run", lambda r: str(r["run_id"])), ("config", lambda r: str(r["config_hash"])[:12])]
