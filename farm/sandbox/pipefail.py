"""A failing command anywhere in a RUN pipeline fails the build step, on both ways farm builds.

A shell's pipeline exits with its *last* command's status, so ``RUN curl -LsSf URL | sh``
"succeeds" offline (curl fails, ``sh`` reads nothing and exits 0) and the image silently lacks
what the step installs. ``pipefail`` makes the pipeline fail instead, but the default shell of
Debian and Ubuntu images (``/bin/sh`` is dash, bookworm's 0.5.12) has no such option.

* The engine's build (:mod:`farm.sandbox.images.ensure`) runs a rewritten copy of the Dockerfile
  (:func:`strict_dockerfile`): each shell-form ``RUN`` whose command has a pipe runs under
  ``/bin/bash -o pipefail`` where the image has bash, else under ``/bin/sh -o pipefail`` where
  that shell knows the option (busybox ash), else unchanged under ``/bin/sh`` (nothing better
  exists there). Only RUNs with a pipe change shell: bash and dash differ in small ways (dash's
  ``echo`` interprets ``\\n``), and a step without a pipe gains nothing from bash. Exec-form RUNs,
  heredoc RUNs and RUNs after a ``SHELL`` instruction (the author chose the shell) are left alone.
* Replay on a running sandbox (:mod:`farm.sandbox.replay`) already runs each step with
  ``/bin/bash -c``; :func:`strict_command` turns pipefail on there.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from farm.errors import FarmError
from farm.tasks.dockerfile import instructions

# a single `|` (not `||`, not `|&`'s second half handled by bash alike): a pipeline may be there
_PIPE = re.compile(r"(?<!\|)\|(?!\|)")
_FLAGS = re.compile(r"^((?:--\S+\s+)*)(.*)$", re.S)
_ESCAPE_DIRECTIVE = re.compile(r"^\s*#\s*escape\s*=\s*(\S)", re.I)
_WRAP = ('set -- {q}; if [ -x /bin/bash ]; then exec /bin/bash -o pipefail -c "$1"; fi; '
         'if (set -o pipefail) 2>/dev/null; then exec /bin/sh -o pipefail -c "$1"; fi; exec /bin/sh -c "$1"')
_WRAPPED = re.compile(r"^(RUN\s+(?:--\S+\s+)*)set -- ('(?:[^']|'\"'\"')*'); if \[ -x /bin/bash \]; then exec "
                      r"/bin/bash -o pipefail -c \"\$1\"; fi; .*$", re.S)


def has_pipe(command: str) -> bool:
    return bool(_PIPE.search(command))


def strict_run(command: str) -> str:
    """The shell-form RUN ``command`` as one that fails when any command of a pipeline fails."""
    return _WRAP.format(q=shlex.quote(command))


def strict_command(command: str) -> str:
    """A build step for ``bash -c`` (replay) with pipefail on."""
    return "set -o pipefail\n" + command


def original_step(text: str) -> str:
    """A build log's ``RUN set -- '...'; ...`` step as the Dockerfile wrote it (else ``text``)."""
    m = _WRAPPED.match(text)
    if m is None:
        return text
    try:
        (command,) = shlex.split(m.group(2))
    except ValueError:
        return text
    return m.group(1) + command


def strict_dockerfile(path: Path) -> str | None:
    """The Dockerfile's text with every shell-form RUN that has a pipe wrapped by
    :func:`strict_run`; None when nothing needs to change or the file cannot be read here (the
    engine then builds the original and reports its own errors)."""
    try:
        text = path.read_text(encoding="utf-8")
        parsed = instructions(text, path)
    except (FarmError, OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        m = _ESCAPE_DIRECTIVE.match(line)
        if m and m.group(1) != "\\":
            return None  # a backtick escape (Windows images): continuation lines differ
        if not line.lstrip().startswith("#"):
            break
    lines = text.splitlines()
    out: list[str] = []
    done = 0  # lines[:done] are handled
    shell_of: dict[str, bool] = {}  # stage name -> it set its own SHELL
    custom_shell, current = False, None  # the stage's SHELL was set; the stage's name
    for ins in parsed:
        if ins.keyword == "FROM":
            parts = ins.args.split()
            base = next((p for p in parts if not p.startswith("--")), "")
            custom_shell = shell_of.get(base.lower(), False)  # a stage built on another keeps its SHELL
            current = parts[-1].lower() if len(parts) >= 3 and parts[-2].lower() == "as" else None
            if current is not None:
                shell_of[current] = custom_shell
            continue
        if ins.keyword == "SHELL":
            custom_shell = True
            if current is not None:
                shell_of[current] = True
            continue
        if ins.keyword != "RUN" or custom_shell or ins.heredocs:
            continue
        flags, command = _FLAGS.match(ins.args).groups()  # type: ignore[union-attr]
        if command.lstrip().startswith("[") or not has_pipe(command):
            continue
        out += lines[done:ins.line - 1]
        out.append(f"RUN {flags}{strict_run(command.strip())}")
        done = ins.end
    if not out:
        return None
    out += lines[done:]
    return "\n".join(out) + "\n"
