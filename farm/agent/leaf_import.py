"""``farm leaf import PATH``: the vendor's system prompt and tool schemas, from the user's copy.

farm's own prompt and tool descriptions are farm's words (farm/agent/tools.py): the vendor's
text cannot be redistributed, but a reproduction of the vendor's numbers needs it. The user
points this at a checkout or an installed copy of the vendor's package; farm reads the module
that holds ``SYSTEM_PROMPT`` and ``OPENAI_TOOLS`` (``frognano/harness/leaf/tools.py``, earlier
``frognano/leaf/tools.py``) without running it -- the two values are read as Python literals --
and writes them to a local folder as ``system_prompt.txt`` and ``tools.json``, with a manifest
``leaf-import.json`` recording where they came from and their content hashes. Runs point
``agent.system_prompt_file`` / ``agent.tools_file`` at the two files; every trial row then
records the hashes and ``prompt_origin=vendor`` (farm/agent/tools.py ``prompt_identity``).
"""

from __future__ import annotations

import ast
import json
import logging
import time
from pathlib import Path
from typing import Any

import farm
from farm.agent.tools import MANIFEST, prompt_identity, prompt_sha256, tools_sha256, validate_tools
from farm.errors import ConfigError

log = logging.getLogger(__name__)

# where the module sits inside the package, newest layout first
LAYOUTS = ("harness/leaf/tools.py", "leaf/tools.py")
PACKAGE = "frognano"


def find_module(path: Path) -> Path:
    """The vendor's tools module under ``path``: the file itself, the package, a checkout or site-packages.

    Raises:
        ConfigError: nothing at ``path`` has the vendor's layout.
    """
    path = path.expanduser()
    if path.is_file():
        return path
    roots = [path, path / PACKAGE, path / "src" / PACKAGE]
    tried = [root / layout for root in roots for layout in LAYOUTS]
    for candidate in tried:
        if candidate.is_file():
            return candidate
    raise ConfigError(f"farm leaf import {str(path)!r}: no vendor tools module there (looked for "
                      f"{', '.join(str(t.relative_to(path)) for t in tried)})")


def read_vendor(module: Path) -> tuple[str, list[dict[str, Any]]]:
    """``SYSTEM_PROMPT`` and ``OPENAI_TOOLS`` of ``module``, read as literals (its code never runs).

    Raises:
        ConfigError: the file does not parse, or lacks either value as a literal, or the tools
            are not five OpenAI function schemas farm implements.
    """
    try:
        tree = ast.parse(module.read_text(encoding="utf-8"), filename=str(module))
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise ConfigError(f"farm leaf import: cannot read {module}: {exc}") from None
    found: dict[str, Any] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id in ("SYSTEM_PROMPT", "OPENAI_TOOLS") and node.value:
                try:
                    found[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    raise ConfigError(f"farm leaf import: {module}: {target.id} is not a literal farm can read "
                                      "without running the vendor's code") from None
    missing = [n for n in ("SYSTEM_PROMPT", "OPENAI_TOOLS") if n not in found]
    if missing:
        raise ConfigError(f"farm leaf import: {module} defines no {' / '.join(missing)}")
    prompt = found["SYSTEM_PROMPT"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError(f"farm leaf import: {module}: SYSTEM_PROMPT is not a non-empty string")
    tools = found["OPENAI_TOOLS"]
    validate_tools(tools, f"farm leaf import: {module}: OPENAI_TOOLS")
    return prompt, tools


def import_leaf(path: Path, out: Path) -> dict[str, Any]:
    """Write the vendor's prompt and tools under ``out``; returns the manifest written beside them.

    Raises:
        ConfigError: see :func:`find_module` and :func:`read_vendor`; ``out`` not writable.
    """
    module = find_module(path)
    prompt, tools = read_vendor(module)
    prompt_file, tools_file = out / "system_prompt.txt", out / "tools.json"
    manifest = {
        "source": str(path.expanduser().resolve()),
        "module": str(module.resolve()),
        "imported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "farm_version": farm.__version__,
        "system_prompt_file": prompt_file.name,
        "tools_file": tools_file.name,
        "system_prompt_sha256": prompt_sha256(prompt.strip()),
        "tools_sha256": tools_sha256(tools),
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
        prompt_file.write_text(prompt, encoding="utf-8")
        tools_file.write_text(json.dumps(tools, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"farm leaf import: cannot write to {str(out)!r}: {exc.strerror or exc}") from None
    return manifest


WARNING = ("reproduce-frognano runs with {what}, not the vendor's: the numbers measure farm's prompt as much as "
           "the model. Import the vendor's text from your copy of its package (farm leaf import PATH) and "
           "pass the agent.system_prompt_file / agent.tools_file it prints.")


def warn_unless_vendor_prompt(arms: list[tuple[str, Any]], experiment: str) -> str | None:
    """One loud warning when a reproduction of the vendor's numbers runs with farm's own wording."""
    if not experiment.startswith("reproduce-"):
        return None
    not_vendor = {name: prompt_identity(a.agent.system_prompt_file, a.agent.tools_file).origin for name, a in arms}
    not_vendor = {k: v for k, v in not_vendor.items() if v != "vendor"}
    if not not_vendor:
        return None
    what = ", ".join(f"arm {k}: {v} prompt/tools" for k, v in sorted(not_vendor.items()))
    text = WARNING.format(what=what)
    log.warning("%s\n%s\n%s", "!" * 78, text, "!" * 78)
    return text
