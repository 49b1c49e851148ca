"""SWE-bench predictions files, and the harness's way of applying a prediction's patch.

A predictions file is what ``python -m swebench.harness.run_evaluation --predictions_path``
reads: JSON lines, a JSON list, or a JSON object keyed by instance id (SWE-agent's shape), each
prediction with ``instance_id``, ``model_name_or_path`` and ``model_patch``. The format is read
from the content, not the file name (the package goes by ``.json`` / ``.jsonl``, and a
``preds.json`` of JSON lines is common). Every problem is a ConfigError naming the file, the
line or instance and the field, where the package's own reader raises a bare ValueError.

The ``predictions`` policy (farm/agent/policies/server.py) answers every task with one Bash
call of :func:`apply_command`: the harness's three commands (``GIT_APPLY_CMDS`` of
``swebench.harness.run_evaluation``) in its order, on the patch the trial staged at the
harness's path (``DOCKER_PATCH``), stopping at the first that succeeds, with no reset in
between (a ``--reject`` that applied some hunks leaves them for ``patch`` as it does there).
The command records which one worked in :data:`APPLIED_PATH`, which the trial reads.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.errors import ConfigError

# the harness's keys (swebench.harness.constants KEY_*), spelled out so that reading a file
# does not need the package; tests/agent/test_predictions.py checks they are the package's
INSTANCE_ID, MODEL, PATCH = "instance_id", "model_name_or_path", "model_patch"
RESULT_DIR = "/tmp/.farm-prediction"
APPLIED_PATH = f"{RESULT_DIR}/applied"  # the command that applied the patch; absent: none did
OUTPUT_PATH = f"{RESULT_DIR}/output.txt"  # what the last command tried printed (apply_command's names)


@dataclass(frozen=True)
class Prediction:
    instance_id: str
    model: str
    patch: str  # as the file holds it; None in the file is ""

    def patch_bytes(self) -> bytes:
        """The bytes the harness writes (``Path.write_text``: UTF-8). A lone surrogate (a
        ``\\udcXX`` escape, how farm's own stored patches carry non-UTF-8 bytes) goes back to the
        byte it stands for, so a patch exported from farm round-trips byte for byte."""
        return self.patch.encode("utf-8", errors="surrogateescape")


@dataclass(frozen=True)
class Predictions:
    path: str
    sha256: str
    by_id: dict[str, Prediction]

    @property
    def model(self) -> str:
        """The one model the file names (``load_predictions`` refuses a file naming several)."""
        return next(iter(self.by_id.values())).model


def load_predictions(path: str | Path) -> Predictions:
    """Read a predictions file (cached on the file's path, size and modification time).

    Raises:
        ConfigError: the file cannot be read, is not one of the three formats, or a prediction
            lacks a field or holds a value of the wrong type; names the field and the value.
    """
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError as exc:
        raise ConfigError(f"agent.predictions={str(p)!r}: cannot read: {exc.strerror or exc}") from None
    return _load(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _load(path: str, size: int, mtime_ns: int) -> Predictions:
    where = f"agent.predictions={path!r}"
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text (byte {exc.start}): JSON files are UTF-8") from None
    items = _records(text, where)
    by_id: dict[str, Prediction] = {}
    for label, item, key in items:
        pred = _prediction(item, f"{where}: {label}", key)
        if pred.instance_id in by_id:
            raise ConfigError(f"{where}: {label}: instance_id {pred.instance_id!r} appears twice")
        by_id[pred.instance_id] = pred
    if not by_id:
        raise ConfigError(f"{where}: holds no predictions")
    models = sorted({p.model for p in by_id.values()})
    if len(models) > 1:
        raise ConfigError(f"{where}: names {len(models)} models in {MODEL!r} ({models[:5]!r}): one run grades "
                          "one model's predictions; split the file per model")
    return Predictions(path, hashlib.sha256(raw).hexdigest(), by_id)


def _records(text: str, where: str) -> list[tuple[str, Any, str | None]]:
    """(label for errors, the record, the key it was filed under) for each prediction."""
    stripped = text.lstrip()
    if not stripped:
        raise ConfigError(f"{where}: the file is empty")
    if stripped[0] in "[{":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            # one object per line also starts with "{": JSON lines, read as such below
            if not (stripped[0] == "{" and exc.msg == "Extra data"):
                raise ConfigError(f"{where}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") \
                    from None
        else:
            if isinstance(data, list):
                return [(f"item {i}", item, None) for i, item in enumerate(data)]
            if isinstance(data, dict) and (INSTANCE_ID in data or PATCH in data):
                return [("line 1", data, None)]  # JSON lines holding one prediction
            if isinstance(data, dict):
                return [(f"key {k!r}", v, str(k)) for k, v in data.items()]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"line {n}", json.loads(line), None))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: line {n}: not valid JSON ({exc.msg}); expected JSON lines, a JSON list, "
                              "or a JSON object keyed by instance id") from None
    return out


def _prediction(item: Any, where: str, key: str | None) -> Prediction:
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: a prediction must be a JSON object with {INSTANCE_ID!r}, {MODEL!r} and "
                          f"{PATCH!r}, got {type(item).__name__} {str(item)[:60]!r}")
    iid = item.get(INSTANCE_ID, key)
    if not isinstance(iid, str) or not iid.strip():
        raise ConfigError(f"{where}: invalid value {iid!r} for {INSTANCE_ID!r}: each prediction needs its instance id")
    if key is not None and iid != key:
        raise ConfigError(f"{where}: invalid value {iid!r} for {INSTANCE_ID!r}: it is filed under {key!r}")
    model = item.get(MODEL)
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"{where} ({iid}): invalid value {model!r} for {MODEL!r}: the model's name is required")
    if PATCH not in item:
        raise ConfigError(f"{where} ({iid}): no {PATCH!r} (use \"\" for an instance the model gave no patch)")
    patch = item[PATCH]
    if patch is not None and not isinstance(patch, str):
        raise ConfigError(f"{where} ({iid}): invalid value of type {type(patch).__name__} for {PATCH!r}: "
                          "must be the patch text")
    return Prediction(iid, model, patch or "")


def harness_apply() -> tuple[list[str], str]:
    """The harness's apply commands and the path it puts the patch at, from the package."""
    try:
        from swebench.harness.constants import DOCKER_PATCH
        from swebench.harness.run_evaluation import GIT_APPLY_CMDS
    except ImportError as exc:
        raise ConfigError(f"agent=predictions applies patches with the swebench package's commands: "
                          f"install it (pip install 'farm[swebench]'): {exc}") from None
    return list(GIT_APPLY_CMDS), DOCKER_PATCH


def apply_command(patch: str | None = None, result_dir: str = RESULT_DIR) -> str:
    """One shell command: the harness's apply commands in order on ``patch`` (default: its own
    path), run in the task's workdir (the Bash tool's), stopping at the first that succeeds; which
    one did goes to ``result_dir``/applied. A subshell, so that ``exit`` ends only it under a tool
    that keeps one shell for every call."""
    commands, default = harness_apply()
    patch = patch or default
    cmds = " ".join(shlex.quote(c) for c in commands)
    d, applied, out = (shlex.quote(p) for p in (result_dir, f"{result_dir}/applied", f"{result_dir}/output.txt"))
    return (f"( mkdir -p {d} && rm -f {applied}; for c in {cmds}; do "
            f"if $c {shlex.quote(patch)} > {out} 2>&1; then cat {out}; echo \">>>>> Applied Patch ($c)\"; "
            f"printf '%s\\n' \"$c\" > {applied}; exit 0; fi; cat {out}; "
            f"echo \"Failed to apply patch to container: $c\"; done; echo '>>>>> Patch Apply Failed'; exit 1 )")
