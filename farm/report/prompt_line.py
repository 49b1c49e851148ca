"""The report header's line on whose words the model saw: the vendor's prompt, or farm's.

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
