"""The differential suite's shared pieces: the corpus, building a case's files, and reading back
the file state a case leaves.

Used by tests/agent/test_leaf_differential.py (farm's side, inside a real sandbox) and by
tests/fixtures/leaf/differential/record.py (the vendor's side). The two programs below run as
``python3 -I -S -c PROGRAM JSON`` wherever the case lives, so both sides build and read a case
with the same code: only the tool path in between differs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "leaf" / "differential"
CORPUS = FIXTURES / "corpus.yaml"
# agent.compat setting -> the recorded vectors of the vendor transport it stands for
VECTORS = {"leaf-2609": FIXTURES / "leaf-2609.jsonl", "leaf-legacy": FIXTURES / "leaf-legacy.jsonl"}
UMASK = {"leaf-2609": 0o077, "leaf-legacy": 0o022}

# Builds {case}/ws (the workdir) and {case}/outside from the corpus's `files`: a value is text,
# {text|b64|repeat: [text, times], mode}, {dir: mode} or {symlink: target}. Paths are relative to the case directory;
# a name with non-UTF-8 bytes is written as b64:<base64 of the name>.
SETUP_PROGRAM = r"""
import base64, json, os, sys
spec = json.loads(sys.argv[1])
case = spec["case"]
os.makedirs(case + "/ws", exist_ok=True)
os.makedirs(case + "/outside", exist_ok=True)
os.chmod(case + "/ws", 0o755)
os.chmod(case + "/outside", 0o755)
def name(rel):
    if rel.startswith("b64:"):
        return os.fsdecode(base64.b64decode(rel[4:]))
    return rel
for rel, value in spec["files"].items():
    path = os.path.join(case, name(rel))
    if isinstance(value, str):
        value = {"text": value}
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    if "dir" in value:
        os.makedirs(path, exist_ok=True)
        os.chmod(path, int(value["dir"], 8))
    elif "symlink" in value:
        os.symlink(value["symlink"], path)
    else:
        if "repeat" in value:  # [text, times]
            data = (value["repeat"][0] * value["repeat"][1]).encode("utf-8")
        elif "text" in value:
            data = value["text"].encode("utf-8")
        else:
            data = base64.b64decode(value["b64"])
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, int(value.get("mode", "644"), 8))
"""

# Prints the case's file state as JSON: [path, kind, mode, content] sorted by path; kind f/d/l,
# content base64 for a file and the target for a link.
SNAPSHOT_PROGRAM = r"""
import base64, json, os, stat, sys
case = sys.argv[1]
rows = []
for top, dirs, files in os.walk(case):
    for n in dirs + files:
        full = os.path.join(top, n)
        rel = os.fsencode(os.path.relpath(full, case)).decode("utf-8", "backslashreplace")
        st = os.lstat(full)
        if stat.S_ISLNK(st.st_mode):
            rows.append([rel, "l", None, os.readlink(full)])
        elif stat.S_ISDIR(st.st_mode):
            rows.append([rel, "d", "%o" % (st.st_mode & 0o7777), None])
        else:
            with open(full, "rb") as f:
                data = base64.b64encode(f.read()).decode()
            rows.append([rel, "f", "%o" % (st.st_mode & 0o7777), data])
print(json.dumps(sorted(rows)))
"""


def load_corpus() -> list[dict[str, Any]]:
    cases = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    return cases


def load_vectors(compat: str) -> dict[str, dict[str, Any]]:
    lines = VECTORS[compat].read_text(encoding="utf-8").splitlines()
    return {v["id"]: v for v in map(json.loads, lines)}


def placeholders(text: str, case_dir: str) -> str:
    """An observation with the case directory written as {CASE}: the two sides run the same
    case in different places."""
    return text.replace(case_dir, "{CASE}")


def call_args(call: list[Any], case_dir: str) -> tuple[str, Any, float]:
    """(tool name, arguments with {CASE} filled in, seconds to wait before the call)."""
    def fill(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace("{CASE}", case_dir)
        if isinstance(v, list):
            return [fill(x) for x in v]
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        return v

    pause = float(call[2]) if len(call) > 2 else 0.0
    return call[0], fill(call[1]), pause
