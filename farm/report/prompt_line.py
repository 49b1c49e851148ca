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


def prompt_line(runs: list[Any]) -> str:
    """``Prompt: ...`` for the header, from the trial rows of ``runs``."""
    seen: dict[tuple[str, str, str], set[str]] = {}
    unrecorded = 0
    for run in runs:
        trials = run.trials
        if "prompt_origin" not in trials.column_names:
            unrecorded += trials.num_rows
            continue
        cols = [trials.column(c).to_pylist() for c in ("prompt_origin", "system_prompt_sha256", "tools_sha256", "arm")]
        for origin, psha, tsha, arm in zip(*cols):
            if origin is None:
                unrecorded += 1
            else:
                seen.setdefault((origin, psha or "", tsha or ""), set()).add(str(arm))
    parts = []
    for (origin, psha, tsha), arms in sorted(seen.items()):
        where = f" in arm{'s' if len(arms) > 1 else ''} {', '.join(sorted(arms))}" if len(seen) > 1 else ""
        parts.append(f"{WORDS.get(origin, origin)}{where} (prompt sha256 {psha[:12]}, tools sha256 {tsha[:12]})")
    if unrecorded:
        parts.append(f"not recorded for {unrecorded} trial row(s) (stored before farm recorded it)")
    return "Prompt: " + ("; ".join(parts) if parts else "no trials") + "."


RULES = {
    "leaf-2609": "the vendor's tool runner under its newest transport (agent.compat=leaf-2609)",
    "leaf-legacy": "the vendor's tool runner under its older transport, umask 022 (agent.compat=leaf-legacy)",
    "farm-safe": ("farm's own tool rules (agent.compat=farm-safe), not the vendor's: scores do not reproduce "
                  "the vendor's harness"),
}


def tool_rules_line(runs: list[Any]) -> str:
    """``Tool rules: ...`` for the header: which ``agent.compat`` the trial rows ran under
    (docs/agent.md lists what each setting changes), per arm when the arms differ."""
    seen: dict[str, set[str]] = {}
    unrecorded = 0
    for run in runs:
        trials = run.trials
        if "agent_compat" not in trials.column_names:
            unrecorded += trials.num_rows
            continue
        for compat, arm in zip(trials.column("agent_compat").to_pylist(), trials.column("arm").to_pylist()):
            if compat is None:
                unrecorded += 1
            else:
                seen.setdefault(compat, set()).add(str(arm))
    parts = []
    for compat, arms in sorted(seen.items()):
        where = f" in arm{'s' if len(arms) > 1 else ''} {', '.join(sorted(arms))}" if len(seen) > 1 else ""
        parts.append(f"{RULES.get(compat, compat)}{where}")
    if unrecorded:
        parts.append(f"not recorded for {unrecorded} trial row(s) (stored before farm recorded it)")
    return "Tool rules: " + ("; ".join(parts) if parts else "no trials") + "."
