"""The report header's lines on whose words and tool rules the model saw: the vendor's, or farm's.

A reproduction of the vendor's numbers needs the vendor's prompt and tool descriptions; farm's
own are its own wording (farm/agent/tools.py). Every trial row records ``prompt_origin`` and
the two hashes; this says what the report's runs used, so nobody mistakes one for the other.
"""

from __future__ import annotations

from typing import Any

WORDS = {
    "vendor": "the vendor's system prompt and tool schemas (imported with `farm leaf import`)",
    "farm": "farm's own system prompt and tool descriptions, not the vendor's wording",
    "custom": "a user-supplied system prompt / tool list (agent.system_prompt_file / agent.tools_file)",
}


def _arms_by(runs: list[Any], columns: tuple[str, ...]) -> tuple[dict[tuple[str, ...], set[str]], int]:
    """The arms seen per distinct value of ``columns`` (the first one decides whether a row
    recorded it), and how many rows did not record it (stored before farm did)."""
    seen: dict[tuple[str, ...], set[str]] = {}
    unrecorded = 0
    for run in runs:
        trials = run.trials
        if columns[0] not in trials.column_names:
            unrecorded += trials.num_rows
            continue
        cols = [trials.column(c).to_pylist() for c in (*columns, "arm")]
        for *values, arm in zip(*cols):
            if values[0] is None:
                unrecorded += 1
            else:
                seen.setdefault(tuple(v or "" for v in values), set()).add(str(arm))
    return seen, unrecorded


def _line(label: str, parts: list[str], unrecorded: int) -> str:
    if unrecorded:
        parts.append(f"not recorded for {unrecorded} trial row(s) (stored before farm recorded it)")
    return f"{label}: " + ("; ".join(parts) if parts else "no trials") + "."


def _where(arms: set[str], seen: dict[tuple[str, ...], set[str]]) -> str:
    """`` in arm(s) ...`` when the arms differ, else nothing."""
    return f" in arm{'s' if len(arms) > 1 else ''} {', '.join(sorted(arms))}" if len(seen) > 1 else ""


def prompt_line(runs: list[Any]) -> str:
    """``Prompt: ...`` for the header, from the trial rows of ``runs``."""
    seen, unrecorded = _arms_by(runs, ("prompt_origin", "system_prompt_sha256", "tools_sha256"))
    parts = [f"{WORDS.get(origin, origin)}{_where(arms, seen)} (prompt sha256 {psha[:12]}, tools sha256 {tsha[:12]})"
             for (origin, psha, tsha), arms in sorted(seen.items())]
    return _line("Prompt", parts, unrecorded)


RULES = {
    "leaf-2609": "the vendor's tool runner under its newest transport (agent.compat=leaf-2609)",
    "leaf-legacy": "the vendor's tool runner under its older transport, umask 022 (agent.compat=leaf-legacy)",
    "farm-safe": ("farm's own tool rules (agent.compat=farm-safe), not the vendor's: scores do not reproduce "
                  "the vendor's harness"),
}


def tool_rules_line(runs: list[Any]) -> str:
    """``Tool rules: ...`` for the header: which ``agent.compat`` the trial rows ran under
    (docs/agent.md lists what each setting changes), per arm when the arms differ."""
    seen, unrecorded = _arms_by(runs, ("agent_compat",))
    parts = [f"{RULES.get(compat, compat)}{_where(arms, seen)}" for (compat,), arms in sorted(seen.items())]
    return _line("Tool rules", parts, unrecorded)
