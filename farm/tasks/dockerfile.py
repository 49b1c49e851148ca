"""Interpret a task's Dockerfile into build steps a sandbox can replay.

farm does not build images on one machine: the local backend runs on the host system and
replays WORKDIR / ENV / COPY / RUN; container backends use the image. Instructions that only
matter to an image builder (LABEL, CMD, ...) are ignored; anything that would change the
filesystem in ways we cannot replay (ADD of URLs, multi-stage builds) is an error naming the
file and the line.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass
from pathlib import Path

from farm.errors import TaskFormatError
from farm.tasks.model import BuildStep

IGNORED = {"ARG", "CMD", "ENTRYPOINT", "LABEL", "SHELL", "USER", "EXPOSE", "VOLUME",
           "STOPSIGNAL", "HEALTHCHECK", "MAINTAINER", "ONBUILD"}


@dataclass(frozen=True)
class ParsedDockerfile:
    image: str | None
    workdir: str | None  # the last WORKDIR
    env: dict[str, str]
    steps: tuple[BuildStep, ...]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations; drop comments and blank lines; keep 1-based line numbers."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue  # comments inside a continued instruction are dropped by docker too
        if not buf:
            start = no
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        out.append((start, buf.strip()))
        buf = ""
    if buf:
        out.append((start, buf.strip()))
    return out


def _parse_env(args: str, path: Path, no: int) -> list[tuple[str, str]]:
    try:
        tokens = shlex.split(args)
    except ValueError as exc:
        raise TaskFormatError(path, f"line {no}: cannot parse ENV {args!r}: {exc}") from None
    if tokens and all("=" in t for t in tokens):
        return [tuple(t.split("=", 1)) for t in tokens]  # type: ignore[misc]
    if len(tokens) >= 2 and "=" not in tokens[0]:
        # legacy form: ENV KEY value with spaces
        return [(tokens[0], args.split(None, 1)[1].strip())]
    raise TaskFormatError(path, f"line {no}: cannot parse ENV {args!r}")


def _copy_args(args: str, path: Path, no: int) -> tuple[list[str], str]:
    if args.startswith("["):
        import json

        try:
            parts = json.loads(args)
        except ValueError:
            raise TaskFormatError(path, f"line {no}: bad JSON form of COPY: {args!r}") from None
    else:
        parts = shlex.split(args)
    parts = [p for p in parts if not p.startswith("--chown") and not p.startswith("--chmod")]
    if any(p.startswith("--") for p in parts):
        flag = next(p for p in parts if p.startswith("--"))
        raise TaskFormatError(path, f"line {no}: COPY flag {flag} is not supported (multi-stage builds cannot be replayed)")
    if len(parts) < 2:
        raise TaskFormatError(path, f"line {no}: COPY needs a source and a destination: {args!r}")
    return parts[:-1], parts[-1]


def parse_dockerfile(path: Path) -> ParsedDockerfile:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(path, f"cannot read Dockerfile: {exc}") from None
    image: str | None = None
    workdir = "/"
    last_workdir: str | None = None
    env: dict[str, str] = {}
    steps: list[BuildStep] = []
    for no, line in _logical_lines(text):
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        args = args.strip()
        if instr == "FROM":
            if image is not None:
                raise TaskFormatError(path, f"line {no}: multi-stage Dockerfiles are not supported (second FROM)")
            tokens = [t for t in args.split() if not t.startswith("--")]
            if not tokens:
                raise TaskFormatError(path, f"line {no}: FROM without an image")
            image = tokens[0]
        elif image is None and instr != "ARG":
            raise TaskFormatError(path, f"line {no}: {instr} before FROM")
        elif instr == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, args.strip('"')))
            last_workdir = workdir
            steps.append(BuildStep("workdir", workdir))
        elif instr == "ENV":
            for key, value in _parse_env(args, path, no):
                env[key] = value
                steps.append(BuildStep("env", key, value))
        elif instr == "COPY":
            sources, dest = _copy_args(args, path, no)
            if not dest.startswith("/"):
                into = dest.endswith("/") or dest in (".", "./")
                dest = posixpath.normpath(posixpath.join(workdir, dest)) + ("/" if into else "")
            for src in sources:
                if src.startswith("/") or ".." in Path(src).parts:
                    raise TaskFormatError(path, f"line {no}: COPY source {src!r} is outside the build context")
                steps.append(BuildStep("copy", src, dest if len(sources) == 1 else dest.rstrip("/") + "/"))
        elif instr == "RUN":
            if args.startswith("["):
                import json

                try:
                    args = shlex.join(json.loads(args))
                except ValueError:
                    raise TaskFormatError(path, f"line {no}: bad JSON form of RUN: {args!r}") from None
            if args.startswith("--"):
                raise TaskFormatError(path, f"line {no}: RUN flags ({args.split()[0]}) are not supported")
            steps.append(BuildStep("run", args))
        elif instr in IGNORED:
            continue
        else:
            raise TaskFormatError(path, f"line {no}: unsupported Dockerfile instruction {instr}")
    if image is None:
        raise TaskFormatError(path, "no FROM instruction")
    return ParsedDockerfile(image=image, workdir=last_workdir, env=env, steps=tuple(steps))
