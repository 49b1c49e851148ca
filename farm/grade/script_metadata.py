"""PEP 723 inline script metadata: the ``# /// script`` block a verifier's Python script declares
its own dependencies in.

Harbor's SWE-bench verifiers write ``parser.py`` from a heredoc in test.sh and run ``uv run
parser.py``; uv reads the block and installs what it names at every verify. The verifier cache
(farm/grade/verifier_cache.py) reads the same blocks so that those wheels are staged ahead of
time. The block is TOML, read as PEP 723 defines it: the comment lines between ``# /// script``
and ``# ///``, each without its leading ``#`` and one space.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

# a block's dependencies resolved together are one closure entry (the parts joined by this): uv
# resolves them jointly, and the joint answer can need a version no part picks alone
# (swebench==4.0.3 with fastcore<1.11 needs ghapi 1.0.11; swebench alone gets the newest ghapi)
JOINT = " + "
_OPEN = re.compile(r"^# /// (?P<type>[a-zA-Z0-9-]+)$")
_CLOSE = "# ///"


class ScriptBlockError(ValueError):
    """A ``# /// script`` block that is not valid PEP 723 metadata (the message names the file)."""


@dataclass(frozen=True)
class ScriptBlock:
    """One script's declared needs: where it was read, its dependencies (normalised requirement
    strings, in the block's order) and its ``requires-python`` (None when absent)."""

    source: str
    line: int
    dependencies: tuple[str, ...]
    requires_python: str | None

    def requirements(self) -> set[str]:
        """What the cache stages for it: each dependency, and all of them resolved together."""
        reqs = set(self.dependencies)
        if len(self.dependencies) > 1:
            reqs.add(JOINT.join(self.dependencies))
        return reqs


def _is_comment(line: str) -> bool:
    return line == "#" or line.startswith("# ")


def _parse(body: list[str], source: str, line: int) -> ScriptBlock:
    where = f"{source}:{line}"
    toml = "\n".join(ln[2:] for ln in body)  # "#" alone is an empty line ("#"[2:] == "")
    try:
        data = tomllib.loads(toml)
    except tomllib.TOMLDecodeError as exc:
        raise ScriptBlockError(f"{where}: the `# /// script` block is not valid TOML ({exc})") from None
    deps = data.get("dependencies", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise ScriptBlockError(f"{where}: `dependencies` must be a list of strings, got {deps!r}")
    normalised = []
    for dep in deps:
        try:
            normalised.append(str(Requirement(dep)))
        except InvalidRequirement as exc:
            raise ScriptBlockError(f"{where}: dependency {dep!r} is not a requirement ({exc})") from None
    rp = data.get("requires-python")
    if rp is not None:
        if not isinstance(rp, str):
            raise ScriptBlockError(f"{where}: `requires-python` must be a string, got {rp!r}")
        try:
            SpecifierSet(rp)
        except InvalidSpecifier as exc:
            raise ScriptBlockError(f"{where}: requires-python {rp!r} is not a version specifier ({exc})") from None
    return ScriptBlock(source, line, tuple(normalised), rp)


def script_blocks(text: str, source: str) -> list[ScriptBlock]:
    """The ``script`` blocks in ``text`` (read from ``source``, which error messages name).

    A ``.py`` source is one script: PEP 723 makes a second block an error. Any other source (a
    test.sh writing scripts through heredocs) may hold one block per script; tabs a ``<<-``
    heredoc strips are stripped here too. Blocks of other types are not ours and are skipped."""
    script = source.endswith(".py")
    lines = text.splitlines() if script else [ln.lstrip("\t") for ln in text.splitlines()]
    found: list[ScriptBlock] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if m is None:
            i += 1
            continue
        # the block runs to the last `# ///` of the comment lines that follow (PEP 723)
        end, j = None, i + 1
        while j < len(lines) and _is_comment(lines[j]):
            if lines[j] == _CLOSE:
                end = j
            j += 1
        if m.group("type") != "script":
            i = (end if end is not None else i) + 1
            continue
        if end is None:
            raise ScriptBlockError(f"{source}:{i + 1}: the `# /// script` block has no closing `# ///` line")
        found.append(_parse(lines[i + 1:end], source, i + 1))
        i = end + 1
    if script and len(found) > 1:
        raise ScriptBlockError(f"{source}: {len(found)} `# /// script` blocks (lines "
                               f"{', '.join(str(b.line) for b in found)}); PEP 723 allows one per script")
    return found


def admitted_pythons(requires_python: str | None, pythons: tuple[str, ...]) -> list[str]:
    """The ``X.Y`` versions of ``pythons`` that ``requires_python`` lets run the script: a
    version line counts when one of its releases does (``>3.12`` admits 3.12.1)."""
    if requires_python is None:
        return list(pythons)
    spec = SpecifierSet(requires_python)
    return [py for py in pythons if any(spec.contains(f"{py}.{patch}") for patch in range(50))]


def requirement_names(req: str) -> list[str]:
    """The distribution names in a pin, a requirement or a JOINT of them, lower-cased."""
    return [re.match(r"[A-Za-z0-9_.-]*", part).group(0).lower() for part in req.split(JOINT)]


def script_records(blocks: list[ScriptBlock], pythons: tuple[str, ...], exclude: tuple[str, ...]) -> list[dict]:
    """The manifest's ``scripts``: each distinct (requires-python, dependencies), how many
    scripts declare it and one of them, the cache's pythons it admits and what ``exclude`` drops."""
    skip = {name.lower() for name in exclude}
    records: dict[tuple, dict] = {}
    for b in blocks:
        key = (b.requires_python, b.dependencies)
        if key in records:
            records[key]["scripts"] += 1
            continue
        records[key] = {"requires_python": b.requires_python, "dependencies": list(b.dependencies),
                        "pythons": admitted_pythons(b.requires_python, pythons), "scripts": 1,
                        "example": f"{b.source}:{b.line}",
                        "excluded": [d for d in b.dependencies if skip.intersection(requirement_names(d))]}
    return sorted(records.values(), key=lambda r: (r["requires_python"] or "", r["dependencies"]))


def script_notes(records: list[dict], pythons: tuple[str, ...]) -> list[str]:
    """What the cache cannot do for those scripts offline, one line each (the builder prints them)."""
    notes = []
    for r in records:
        what = f"{r['example']} (and {r['scripts'] - 1} more)" if r["scripts"] > 1 else r["example"]
        if not r["pythons"]:
            notes.append(f"{what}: requires-python {r['requires_python']!r} admits none of the cache's pythons "
                         f"{', '.join(pythons)} (--pythons); its dependencies are staged for those only")
        if r["excluded"]:
            notes.append(f"{what}: {', '.join(r['excluded'])} left out by --exclude, so `uv run` needs an index")
    return notes
