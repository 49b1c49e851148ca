"""Interpret a task's Dockerfile: its stages, and the build steps a sandbox can replay.

Every instruction an image builder accepts is parsed (BuildKit heredocs, ``ARG``, multi-stage
builds and ``COPY --from`` included); what an image builder would do is kept faithfully in
the data model. Whether a backend can *honour* a step is a separate question: a backend that
builds images (podman/docker ``build``) honours everything, while one that replays steps on
a running system (the local backend, a pod started from the base image) cannot copy from
another stage's filesystem or fetch an ``ADD`` URL. :func:`replay_blockers` names each such
step with its line and the reason, and :func:`check_replayable` raises
:class:`DockerfileUnsupported` (``task_unsupported:dockerfile_instruction``) for the first.

Parsing is lazy where the Dockerfile is not the image source: :func:`parse_cached` is what
the loader and the backends call, so a file is read once, only when something needs it.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from farm.errors import TaskFormatError, UnsupportedTaskError
from farm.tasks.model import BuildStep, Environment

# Instructions that only matter to an image builder or to `docker run` defaults.
IGNORED = {"CMD", "ENTRYPOINT", "LABEL", "SHELL", "USER", "EXPOSE", "VOLUME", "STOPSIGNAL",
           "HEALTHCHECK", "MAINTAINER", "ONBUILD"}
KNOWN = IGNORED | {"FROM", "ARG", "ENV", "WORKDIR", "COPY", "ADD", "RUN"}
_HEREDOC = re.compile(r"(?<![<\S])<<(?!<)(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")
_VAR = re.compile(r"\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_ARCHIVE = re.compile(r"\.(tar|tgz|tar\.gz|tar\.bz2|tbz2|tar\.xz|txz)$")
# RUN flags whose effect replay can ignore without changing the result (a cache mount only
# speeds a build up; --network is governed by the sandbox's own network setting).
_HARMLESS_RUN_FLAGS = ("--mount=type=cache", "--network")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Dockerfile variable substitution: $VAR, ${VAR}, ${VAR:-default}, ${VAR:+alt}, \\$."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "\\$":
            return "$"
        name = m.group(1) or m.group(4)
        cur = env.get(name, "")
        if m.group(2) == "-":
            return cur or m.group(3)
        if m.group(2) == "+":
            return m.group(3) if cur else ""
        return cur

    return _VAR.sub(sub, value)


class DockerfileUnsupported(UnsupportedTaskError):
    """A well-formed Dockerfile step that the chosen way of building cannot honour."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="dockerfile_instruction")


@dataclass(frozen=True)
class Heredoc:
    delimiter: str
    body: str  # with a trailing newline, tabs stripped for <<-
    quoted: bool


@dataclass(frozen=True)
class Instruction:
    line: int  # 1-based line of the keyword
    keyword: str  # upper case
    args: str  # continuation lines joined; heredoc bodies are in ``heredocs``
    heredocs: tuple[Heredoc, ...] = ()
    end: int = 0  # 1-based last line it spans (continuations and heredoc bodies included)

    @property
    def text(self) -> str:
        return f"{self.keyword} {self.args}".strip()


@dataclass(frozen=True)
class Stage:
    index: int
    name: str | None  # FROM ... AS <name>
    base: str  # the FROM argument, build args expanded
    base_stage: int | None  # index of the earlier stage this one starts from, if any
    line: int
    steps: tuple[BuildStep, ...]


@dataclass(frozen=True)
class ParsedDockerfile:
    path: Path
    stages: tuple[Stage, ...]
    image: str  # the external image the final stage starts from (through its stage chain)
    workdir: str | None  # the last WORKDIR in effect in the final stage
    env: dict[str, str]  # ENV of the final stage (unexpanded, as written)
    steps: tuple[BuildStep, ...]  # what building the final stage does, in order
    base_images: tuple[str, ...] = field(default=())  # every external image it reads

    @property
    def multi_stage(self) -> bool:
        return len(self.stages) > 1


def instructions(text: str, path: Path) -> list[Instruction]:
    """Logical instructions: continuations joined, comments dropped, heredoc bodies collected."""
    lines = text.splitlines()
    out: list[Instruction] = []
    i = 0
    while i < len(lines):
        raw = lines[i].rstrip()
        if not raw.strip() or raw.lstrip().startswith("#"):
            i += 1
            continue
        start = i + 1
        buf = ""
        while True:
            line = lines[i].rstrip()
            i += 1
            if buf and line.lstrip().startswith("#"):
                continue  # comments inside a continued instruction are dropped by docker too
            if line.endswith("\\") and i < len(lines):
                buf += line[:-1] + " "
                continue
            buf += line.removesuffix("\\")
            break
        keyword, _, args = buf.strip().partition(" ")
        keyword, args = keyword.upper(), args.strip()
        docs: list[Heredoc] = []
        if keyword in ("RUN", "COPY", "ADD"):
            for m in _HEREDOC.finditer(args):
                strip_tabs, quoted, delim = m.group(1) == "-", bool(m.group(2)), m.group(3)
                body: list[str] = []
                while i < len(lines):
                    line = lines[i]
                    i += 1
                    check = line.lstrip("\t") if strip_tabs else line
                    if check.rstrip("\r") == delim:
                        break
                    body.append(check)
                else:
                    raise TaskFormatError(path, f"line {start}: heredoc <<{delim} is never closed")
                docs.append(Heredoc(delim, "".join(f"{b}\n" for b in body), quoted))
        out.append(Instruction(start, keyword, args, tuple(docs), end=i))
    return out


def _env_pairs(ins: Instruction, path: Path) -> list[tuple[str, str]]:
    try:
        tokens = shlex.split(ins.args)
    except ValueError as exc:
        raise TaskFormatError(path, f"line {ins.line}: cannot parse {ins.keyword} {ins.args!r}: {exc}") from None
    if tokens and all("=" in t for t in tokens):
        return [tuple(t.split("=", 1)) for t in tokens]  # type: ignore[misc]
    if ins.keyword == "ENV" and len(tokens) >= 2 and "=" not in tokens[0]:
        return [(tokens[0], ins.args.split(None, 1)[1].strip())]  # legacy form: ENV KEY value with spaces
    if ins.keyword == "ARG" and len(tokens) == 1:
        return [(tokens[0], "\0")]  # declared without a default
    raise TaskFormatError(path, f"line {ins.line}: cannot parse {ins.keyword} {ins.args!r}")


def _split_flags(parts: list[str]) -> tuple[dict[str, str], list[str]]:
    flags: dict[str, str] = {}
    rest = list(parts)
    while rest and rest[0].startswith("--"):
        name, _, value = rest.pop(0)[2:].partition("=")
        flags[name] = value
    return flags, rest


def _copy_parts(ins: Instruction, path: Path) -> tuple[dict[str, str], list[str], str]:
    args = ins.args
    flags_text = ""
    if "[" in args and not args.startswith("["):  # flags then JSON form
        flags_text, args = args[: args.index("[")], args[args.index("["):]
    if args.startswith("["):
        try:
            parts = [str(p) for p in json.loads(args)]
        except ValueError:
            raise TaskFormatError(path, f"line {ins.line}: bad JSON form of {ins.keyword}: {ins.args!r}") from None
        parts = flags_text.split() + parts
    else:
        try:
            parts = shlex.split(args)
        except ValueError as exc:
            raise TaskFormatError(path, f"line {ins.line}: cannot parse {ins.keyword} {ins.args!r}: {exc}") from None
    flags, rest = _split_flags(parts)
    if len(rest) < 2:
        raise TaskFormatError(path, f"line {ins.line}: {ins.keyword} needs a source and a destination: {ins.args!r}")
    return flags, rest[:-1], rest[-1]


def _heredoc_file_step(ins: Instruction, doc: Heredoc, dest: str, n: int) -> BuildStep:
    """``COPY <<EOF /dest``: writing the file is a shell step any replay can run."""
    end = f"FARM_EOF_{n}"
    command = (f"mkdir -p {shlex.quote(posixpath.dirname(dest) or '/')} && cat > {shlex.quote(dest)} <<'{end}'\n"
               f"{doc.body}{end}\n")
    return BuildStep("run", command, line=ins.line)


def _run_command(ins: Instruction, path: Path) -> tuple[str, dict[str, str]]:
    args = ins.args
    if args.startswith("["):
        try:
            return shlex.join(json.loads(args)), {}
        except (ValueError, TypeError):
            raise TaskFormatError(path, f"line {ins.line}: bad JSON form of RUN: {args!r}") from None
    flags: dict[str, str] = {}
    while args.startswith("--"):
        flag, _, args = args.partition(" ")
        name, _, value = flag[2:].partition("=")
        flags[name] = value
        args = args.lstrip()
    if not ins.heredocs:
        return args, flags
    if not _HEREDOC.sub("", args).strip() and len(ins.heredocs) == 1:
        body = ins.heredocs[0].body
        if not body.startswith("#!"):
            return body, flags  # a heredoc alone is a script for the default shell
        end = "FARM_EOF_SCRIPT"
        return (f'f=$(mktemp) && cat > "$f" <<\'{end}\'\n{body}{end}\n'
                'chmod +x "$f" && "$f"; rc=$?; rm -f "$f"; exit $rc'), flags
    # `RUN python3 <<EOF` and friends: the shell reads heredocs in the same syntax
    return args + "\n" + "".join(f"{d.body}{d.delimiter}\n" for d in ins.heredocs), flags


def _stage_steps(ins: Instruction, path: Path, workdir: str, scope: dict[str, str],
                 stage_names: dict[str, int]) -> tuple[list[BuildStep], str]:
    """The build steps of one instruction inside a stage, and the WORKDIR after it."""
    kw = ins.keyword
    if kw == "WORKDIR":
        workdir = posixpath.normpath(posixpath.join(workdir, ins.args.strip('"')))
        return [BuildStep("workdir", workdir, line=ins.line)], workdir
    if kw == "ENV":
        return [BuildStep("env", k, v, line=ins.line) for k, v in _env_pairs(ins, path)], workdir
    if kw == "RUN":
        command, flags = _run_command(ins, path)
        extra = sorted(f"--{k}={v}" if v else f"--{k}" for k, v in flags.items()
                       if not any(f"--{k}={v}".startswith(h) for h in _HARMLESS_RUN_FLAGS))
        return [BuildStep("run", command, line=ins.line, flags=tuple(extra))], workdir
    # COPY / ADD
    if ins.heredocs:
        parts = ins.args.split()
        dest = parts[-1]
        if not dest.startswith("/"):
            dest = posixpath.join(workdir, dest)
        many = len(ins.heredocs) > 1 or dest.endswith("/")
        steps = [_heredoc_file_step(ins, d, posixpath.join(dest, d.delimiter) if many else dest, n)
                 for n, d in enumerate(ins.heredocs)]
        return steps, workdir
    flags, sources, dest = _copy_parts(ins, path)
    if not dest.startswith("/"):
        into = dest.endswith("/") or dest in (".", "./")
        dest = posixpath.normpath(posixpath.join(workdir, dest)) + ("/" if into else "")
    from_ = expand(flags.get("from", ""), scope)
    if from_.isdigit():  # --from=<stage index>: name it when the stage has a name
        from_ = next((n for n, i in stage_names.items() if i == int(from_)), from_)
    step_flags = tuple(sorted(f"--{k}={v}" for k, v in flags.items() if k not in ("from", "chown", "chmod", "link")))
    steps = []
    for src in sources:
        if not from_:
            if kw == "ADD" and (re.match(r"^[a-z]+://", src) or src.startswith("git@")):
                step_flags += (f"--url={src}",)
            elif src.startswith("/") or ".." in Path(src).parts:
                raise TaskFormatError(path, f"line {ins.line}: {kw} source {src!r} is outside the build context")
            elif kw == "ADD" and _ARCHIVE.search(src):
                step_flags += ("--extract",)
        steps.append(BuildStep("copy", src, dest if len(sources) == 1 else dest.rstrip("/") + "/",
                               line=ins.line, from_stage=from_, flags=step_flags))
    return steps, workdir


def parse_dockerfile(path: Path) -> ParsedDockerfile:
    """Parse every stage of a Dockerfile; malformed input names the file and the line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(path, f"cannot read Dockerfile: {exc}") from None
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    names: dict[str, int] = {}
    # per stage: steps, workdir, env, scope (ARG + ENV values for expansion)
    cur: dict | None = None
    chain_state: list[dict] = []

    def close() -> None:
        if cur is not None:
            stages.append(Stage(cur["index"], cur["name"], cur["base"], cur["base_stage"], cur["line"],
                                tuple(cur["steps"])))
            chain_state.append(cur)

    for ins in instructions(text, path):
        kw = ins.keyword
        if kw not in KNOWN:
            raise TaskFormatError(path, f"line {ins.line}: unknown Dockerfile instruction {kw}")
        if kw == "FROM":
            close()
            try:
                tokens = shlex.split(ins.args)
            except ValueError as exc:
                raise TaskFormatError(path, f"line {ins.line}: cannot parse FROM {ins.args!r}: {exc}") from None
            _, tokens = _split_flags(tokens)
            if not tokens:
                raise TaskFormatError(path, f"line {ins.line}: FROM without an image")
            base = expand(tokens[0], global_args)
            name = tokens[2] if len(tokens) >= 3 and tokens[1].lower() == "as" else None
            base_stage = names.get(base.lower())
            parent = chain_state[base_stage] if base_stage is not None else None
            cur = {"index": len(stages), "name": name, "base": base, "base_stage": base_stage, "line": ins.line,
                   "steps": [], "workdir": parent["workdir"] if parent else "/",
                   "last_workdir": parent["last_workdir"] if parent else None,
                   "env": dict(parent["env"]) if parent else {},
                   "scope": dict(parent["scope"]) if parent else {}}
            if name:
                names[name.lower()] = cur["index"]
            continue
        if kw == "ARG":
            for key, value in _env_pairs(ins, path):
                if cur is None:
                    if value != "\0":
                        global_args[key] = expand(value, global_args)
                    continue
                # inside a stage an ARG without a default takes the global one, if any
                value = global_args.get(key, "\0") if value == "\0" else expand(value, cur["scope"])
                if value != "\0":
                    cur["scope"][key] = value
                    cur["steps"].append(BuildStep("env", key, value, line=ins.line, build_only=True))
            continue
        if cur is None:
            raise TaskFormatError(path, f"line {ins.line}: {kw} before FROM")
        if kw in IGNORED:
            continue
        steps, cur["workdir"] = _stage_steps(ins, path, cur["workdir"], cur["scope"], names)
        if kw == "WORKDIR":
            cur["last_workdir"] = cur["workdir"]
        if kw == "ENV":
            for s in steps:
                cur["env"][s.arg] = s.value
                cur["scope"][s.arg] = expand(s.value, cur["scope"])
        cur["steps"].extend(steps)
    close()
    if not stages:
        raise TaskFormatError(path, "no FROM instruction")
    final = stages[-1]
    chain = [final]
    while chain[-1].base_stage is not None:
        chain.append(stages[chain[-1].base_stage])
    steps = tuple(s for stage in reversed(chain) for s in stage.steps)
    externals = tuple(dict.fromkeys(
        [s.base for s in stages if s.base_stage is None]
        + [st.from_stage for s in stages for st in s.steps
           if st.from_stage and st.from_stage.lower() not in names and not st.from_stage.isdigit()]))
    last = chain_state[-1]  # the final stage, with what it inherited through its chain
    return ParsedDockerfile(path=path, stages=tuple(stages), image=chain[-1].base, workdir=last["last_workdir"],
                            env=dict(last["env"]), steps=steps, base_images=externals)


@lru_cache(maxsize=4096)
def _parse_cached(path: str, mtime_ns: int, size: int) -> ParsedDockerfile:
    return parse_dockerfile(Path(path))


def parse_cached(path: Path) -> ParsedDockerfile:
    """:func:`parse_dockerfile`, read once per file version (many trials share a task)."""
    try:
        st = Path(path).stat()
    except OSError as exc:
        raise TaskFormatError(path, f"cannot read Dockerfile: {exc}") from None
    return _parse_cached(str(path), st.st_mtime_ns, st.st_size)


def scan_workdir(path: Path) -> str | None:
    """The last WORKDIR of the final stage, read without failing on anything else in the file.

    Used when ``docker_image`` names the image: the Dockerfile is then not needed to load the
    task, and a construct farm cannot replay must not stop the task from loading.
    """
    try:
        return parse_cached(path).workdir
    except TaskFormatError:
        pass
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    workdir, last = "/", None
    for line in text.splitlines():
        tokens = line.strip().split(None, 1)
        if len(tokens) == 2 and tokens[0].upper() == "FROM":
            workdir, last = "/", None
        elif len(tokens) == 2 and tokens[0].upper() == "WORKDIR":
            workdir = last = posixpath.normpath(posixpath.join(workdir, tokens[1].strip().strip('"')))
    return last


def describe(step: BuildStep) -> str:
    head = f"Dockerfile line {step.line}: " if step.line else ""
    if step.kind == "copy":
        flags = "".join(f" {f}" for f in step.flags if not f.startswith("--url="))
        src = next((f[6:] for f in step.flags if f.startswith("--url=")), step.arg)
        frm = f" --from={step.from_stage}" if step.from_stage else ""
        return f"{head}COPY{frm}{flags} {src} {step.value}"
    first = step.arg.splitlines()[0] if step.arg else ""
    flags = "".join(" " + f for f in step.flags)
    return f"{head}{step.kind.upper()}{flags} {first}" + (" ..." if "\n" in step.arg else "")


def replay_blockers(steps: tuple[BuildStep, ...]) -> list[str]:
    """Why each step that replay on a running system cannot honour is unreplayable."""
    out = []
    for step in steps:
        if step.kind == "copy" and step.from_stage:
            out.append(f"{describe(step)}: copies from the filesystem of another image or build stage "
                       f"({step.from_stage}), which step replay does not have")
        elif step.kind == "copy" and any(f.startswith("--url=") for f in step.flags):
            out.append(f"{describe(step)}: ADD of a URL is fetched by the image builder, not replayed")
        elif step.kind == "copy" and "--extract" in step.flags:
            out.append(f"{describe(step)}: ADD of an archive unpacks it, which replay would not do")
        elif step.flags:
            out.append(f"{describe(step)}: flag(s) {' '.join(step.flags)} change what the step does "
                       "and cannot be replayed")
    return out


def check_replayable(environment: Environment, who: str = "build-step replay") -> None:
    """Raise :class:`DockerfileUnsupported` naming the first step ``who`` cannot honour."""
    blockers = replay_blockers(environment.build_steps)
    if blockers:
        more = f" (and {len(blockers) - 1} more)" if len(blockers) > 1 else ""
        where = f"{environment.dockerfile}: " if environment.dockerfile else ""
        raise DockerfileUnsupported(f"{where}{blockers[0]}{more}; {who} cannot build this task: "
                                    "use a backend that builds images (sandbox=docker) or a prebuilt image")
