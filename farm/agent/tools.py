"""The five tool schemas the model sees, the system prompt, and loading replacements for both.

Parameter names, types and required fields match the Leaf harness exactly (so a model trained
against it sees the same interface); the descriptions are farm's own words. A user who wants
the vendor's exact wording points ``agent.tools_file`` / ``agent.system_prompt_file`` at files
holding it.

tools_file format (JSON or YAML): a list of OpenAI tool objects
``[{"type": "function", "function": {"name": "Read", "description": ..., "parameters": ...}}]``,
or a mapping with a ``tools`` key holding that list.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from farm.errors import ConfigError
from farm.sandbox.inside.leaf_tools import TOOL_NAMES

PROMPTS = Path(__file__).parent / "prompts"

# Read-only tools may run side by side; the others change the workspace.
READ_ONLY = frozenset({"Read", "Glob"})


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


DEFAULT_TOOLS: list[dict[str, Any]] = [
    _fn(
        "Read",
        "Show a text file with each line prefixed by its 1-based line number. Use offset and "
        "limit to look at part of a large file.",
        {
            "file_path": {"type": "string",
                          "description": "File to show; relative paths start at the project directory."},
            "offset": {"type": "integer", "description": "First line to show (1-based)."},
            "limit": {"type": "integer", "description": "How many lines to show at most."},
        },
        ["file_path"],
    ),
    _fn(
        "Write",
        "Create a file or overwrite it completely with the given text. Missing parent "
        "directories are created.",
        {
            "file_path": {"type": "string", "description": "File to write."},
            "content": {"type": "string", "description": "The complete new contents."},
        },
        ["file_path", "content"],
    ),
    _fn(
        "Edit",
        "Change a file by replacing one exact piece of text with another. The text to replace "
        "must occur exactly once unless replace_all is true.",
        {
            "file_path": {"type": "string", "description": "File to change."},
            "old_string": {"type": "string", "description": "Exact existing text, including whitespace."},
            "new_string": {"type": "string", "description": "Text to put in its place."},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence instead of exactly one."},
        },
        ["file_path", "old_string", "new_string"],
    ),
    _fn(
        "Glob",
        "List files whose paths match a glob pattern such as src/**/*.py (directories are not "
        "listed).",
        {
            "pattern": {"type": "string", "description": "Glob pattern, e.g. **/*.py"},
            "path": {"type": "string", "description": "Directory to search from; defaults to the project directory."},
        },
        ["pattern"],
    ),
    _fn(
        "Bash",
        "Run a shell command in the project directory and return its exit code, standard "
        "output and standard error. Each call starts a new shell, so cd and exported "
        "variables do not carry over to the next call.",
        {
            "command": {"type": "string", "description": "The bash command line to run."},
            "description": {"type": "string", "description": "A few words on why you run it."},
            "timeout": {"type": "number", "description": "Time limit in seconds (default 120)."},
        },
        ["command"],
    ),
]


# Required parameters of the default tools, as the schemas declare them. A call without them
# gets the tool's own "X is required" observation (as in Leaf), and counts as a parse failure:
# that is what vLLM's qwen3_coder parser leaves when a <parameter> block is never closed.
REQUIRED: dict[str, frozenset[str]] = {
    t["function"]["name"]: frozenset(t["function"]["parameters"]["required"]) for t in DEFAULT_TOOLS
}
# the sandbox's tools accept `path` where a `file_path` is missing (Leaf's rule)
ALIASES: dict[str, str] = {"file_path": "path"}


def missing_required(name: str, args: dict[str, Any]) -> list[str]:
    """Required parameters of a default tool that ``args`` lacks (aliases count)."""
    return sorted(p for p in REQUIRED.get(name, ()) if p not in args and ALIASES.get(p) not in args)


def _load_structured(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{what}={str(path)!r}: cannot read: {exc.strerror or exc}") from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{what}={str(path)!r}: not valid JSON/YAML: {exc}") from None


def validate_tools(data: Any, what: str) -> None:
    """Raises ConfigError unless ``data`` is a non-empty list of OpenAI function tools farm implements."""
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{what}: expected a non-empty list of tools (or {{tools: [...]}})")
    for i, tool in enumerate(data):
        fn = tool.get("function") if isinstance(tool, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(name, str):
            raise ConfigError(f"{what}: tool #{i} must look like "
                              "{type: function, function: {name: ..., parameters: ...}}")
        if name not in TOOL_NAMES:
            raise ConfigError(f"{what}: tool #{i} has name {name!r}; farm implements {list(TOOL_NAMES)}")


@lru_cache(maxsize=16)
def _tools_from_file(path: str) -> tuple[str, ...]:
    data = _load_structured(Path(path), "agent.tools_file")
    if isinstance(data, dict):
        data = data.get("tools")
    validate_tools(data, f"agent.tools_file={path!r}")
    # Kept as JSON text so the cache cannot be mutated through a returned list.
    return tuple(json.dumps(t) for t in data)


def load_tools(tools_file: str | None = None) -> list[dict[str, Any]]:
    """The tool list sent with every request: farm's defaults or the user's replacement."""
    if not tools_file:
        return copy.deepcopy(DEFAULT_TOOLS)
    return [json.loads(t) for t in _tools_from_file(str(Path(tools_file).expanduser()))]


def load_system_prompt(system_prompt_file: str | None = None) -> str:
    path = Path(system_prompt_file).expanduser() if system_prompt_file else PROMPTS / "system.txt"
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(
            f"agent.system_prompt_file={str(path)!r}: cannot read: {exc.strerror or exc}"
        ) from None
    if not text:
        raise ConfigError(f"agent.system_prompt_file={str(path)!r}: file is empty")
    return text


# `farm leaf import` writes this beside the files it imports (farm/agent/leaf_import.py)
MANIFEST = "leaf-import.json"
ORIGINS = ("farm", "vendor", "custom")


def prompt_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tools_sha256(tools: list[dict[str, Any]]) -> str:
    """Of the tool list as canonical JSON: the same schemas hash the same in any file format."""
    blob = json.dumps(tools, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class PromptIdentity:
    origin: str  # farm (farm's own wording) | vendor (both imported, unchanged) | custom (anything else)
    system_prompt_sha256: str
    tools_sha256: str


def _imported(file: str | None, key: str, digest: str) -> bool:
    """``file`` was written by `farm leaf import` and is unchanged since (its manifest says so)."""
    if not file:
        return False
    path = Path(file).expanduser()
    try:
        manifest = json.loads((path.parent / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get(f"{key}_file") == path.name \
        and manifest.get(f"{key}_sha256") == digest


def prompt_identity(system_prompt_file: str | None = None, tools_file: str | None = None) -> PromptIdentity:
    """What the model is shown: the hashes of the system prompt and the tool list, and whose words they are.

    Raises:
        ConfigError: a named file cannot be read or is not valid.
    """
    prompt = prompt_sha256(load_system_prompt(system_prompt_file))
    tools = tools_sha256(load_tools(tools_file))
    if not system_prompt_file and not tools_file:
        origin = "farm"
    elif _imported(system_prompt_file, "system_prompt", prompt) and _imported(tools_file, "tools", tools):
        origin = "vendor"
    else:
        origin = "custom"
    return PromptIdentity(origin, prompt, tools)


def prompt_columns(system_prompt_file: str | None, tools_file: str | None) -> dict[str, str]:
    """The trial row's prompt_origin / system_prompt_sha256 / tools_sha256 (empty when unreadable:
    the agent then fails with the file's own error, and the row says so)."""
    try:
        ident = prompt_identity(system_prompt_file, tools_file)
    except ConfigError:
        return {}
    return {"prompt_origin": ident.origin, "system_prompt_sha256": ident.system_prompt_sha256,
            "tools_sha256": ident.tools_sha256}
