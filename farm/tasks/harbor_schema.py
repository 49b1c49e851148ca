"""Which task.toml fields (Harbor task schema up to 1.4) farm reads, and which it does not honour.

``HONOURED`` fields change what a trial does. ``PARSED`` fields land in the Task but no
backend enforces them yet: a dataset that sets them gets one warning per field with the
number of tasks (the note says what actually happens). ``IGNORED`` fields are not read at
all. Anything else is an unknown field (a typo, or a newer schema) and is warned about the
same way. When a backend starts honouring a field, move it to ``HONOURED``.
"""

from __future__ import annotations

from typing import Any

TOP = {"version", "schema_version", "source", "task", "metadata", "agent", "verifier", "environment",
       "solution", "steps", "multi_step_reward_strategy", "artifacts"}

HONOURED: dict[str, set[str]] = {
    "task": {"name", "version", "description", "authors", "keywords"},
    "agent": {"timeout_sec", "network_mode"},
    "verifier": {"timeout_sec", "env", "network_mode"},
    "environment": {"build_timeout_sec", "docker_image", "base_image", "os", "cpus", "memory", "memory_mb",
                    "storage", "storage_mb", "env", "workdir", "network_mode", "allow_internet"},
    "solution": set(),
}

PARSED: dict[str, str] = {
    "agent.allowed_hosts": "parsed into the task; no backend enforces host allowlists yet",
    "agent.user": "parsed into the task; commands still run as the sandbox's default user",
    "verifier.allowed_hosts": "parsed into the task; no backend enforces host allowlists yet",
    "verifier.user": "parsed into the task; the verifier still runs as the sandbox's default user",
    "verifier.environment_mode": "parsed into the task; the verifier runs as grade.mode says",
    "verifier.environment": "parsed into the task (a separate verifier environment); not used by the graders yet",
    "environment.allowed_hosts": "parsed into the task; no backend enforces host allowlists yet",
    "environment.healthcheck": "parsed into the task; no backend runs it before the agent yet",
    "environment.gpus": "parsed into the task; no backend attaches GPUs to sandboxes yet",
    "solution.env": "parsed into the task; the oracle does not export it yet",
}

IGNORED: dict[str, str] = {
    "environment.gpu_types": "ignored: GPU types are not scheduled",
    "environment.tpu": "ignored: TPUs are not scheduled",
    "environment.mcp_servers": "ignored: no MCP servers are offered to the agent",
    "environment.skills_dir": "ignored: no skills are uploaded",
    "verifier.collect": "ignored: collect hooks are not run",
    "artifacts": "ignored: declared artifacts are not downloaded",
    "steps": "ignored: multi-step tasks run as one step (top-level instruction.md and tests/)",
    "multi_step_reward_strategy": "ignored: multi-step tasks run as one step",
}

# Files in a task directory that farm does not use.
FILES: dict[str, str] = {
    "environment/docker-compose.yaml": "ignored: multi-container tasks run only their Dockerfile or docker_image",
    "environment/docker-compose.yml": "ignored: multi-container tasks run only their Dockerfile or docker_image",
    "steps": "ignored: multi-step tasks run as one step",
    "trajectory.json": "ignored: no prior trajectory is given to the agent",
}


def _is_default(name: str, value: Any) -> bool:
    """Values that ask for nothing farm lacks (``gpus = 0``, an empty table) are not warned about."""
    if value in (None, "", [], {}):
        return True
    if name == "environment.gpus":
        return value == 0
    if name == "verifier.environment_mode":
        return value == "shared"
    return False


def unhonoured_fields(data: dict[str, Any]) -> dict[str, str]:
    """field -> note, for every field of one task.toml that farm does not honour."""
    out: dict[str, str] = {}
    for key, value in data.items():
        if key not in TOP:
            out[key] = "unknown field: ignored"
            continue
        if key in IGNORED and not _is_default(key, value):
            out[key] = IGNORED[key]
        if key not in HONOURED or not isinstance(value, dict):
            continue
        for sub, subvalue in value.items():
            name = f"{key}.{sub}"
            if sub in HONOURED[key]:
                continue
            if name in PARSED:
                if not _is_default(name, subvalue):
                    out[name] = PARSED[name]
            elif name in IGNORED:
                if not _is_default(name, subvalue):
                    out[name] = IGNORED[name]
            else:
                out[name] = "unknown field: ignored"
    return out
