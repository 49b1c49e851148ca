"""The Dockerfile parser: BuildKit heredocs, ARG, multi-stage builds, and what replay cannot honour.

Heredoc steps are executed with a real shell to show they do what the builder would do.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from farm.errors import TaskFormatError
from farm.tasks.dockerfile import DockerfileUnsupported, check_replayable, parse_dockerfile, replay_blockers
from farm.tasks.model import Environment


def parse(tmp_path: Path, text: str):
    df = tmp_path / "Dockerfile"
    df.write_text(text)
    return parse_dockerfile(df)


def sh(command: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["/bin/sh", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True).stdout


def test_run_heredoc_is_one_step_not_instructions(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    p = parse(tmp_path, f"""# syntax=docker/dockerfile:1
FROM ubuntu:24.04
WORKDIR {out}
RUN <<'EOF'
cat > config.xml <<'XML'
<?xml version="1.0"?>
<config value="$HOME"/>
XML
echo done > marker
EOF
RUN echo after
""")
    runs = [s for s in p.steps if s.kind == "run"]
    assert len(runs) == 2 and runs[1].arg == "echo after" and runs[0].line == 4
    sh(runs[0].arg, out)
    assert (out / "config.xml").read_text() == '<?xml version="1.0"?>\n<config value="$HOME"/>\n'
    assert (out / "marker").read_text() == "done\n"


def test_heredoc_fed_to_a_command_and_a_shebang_script(tmp_path: Path) -> None:
    p = parse(tmp_path, """FROM python:3.12
RUN python3 - <<EOF
print("from", "python")
EOF
RUN <<EOT
#!/usr/bin/env python3
import sys
print(sys.version_info[0])
EOT
RUN <<-EOF
\techo tab-stripped
\tEOF
""")
    cmds = [s.arg for s in p.steps]
    assert sh(cmds[0], tmp_path) == "from python\n"
    assert sh(cmds[1], tmp_path) == "3\n"
    assert sh(cmds[2], tmp_path) == "tab-stripped\n"


def test_copy_heredoc_writes_the_file(tmp_path: Path) -> None:
    p = parse(tmp_path, f"""FROM debian:12
WORKDIR {tmp_path}/app
COPY <<EOF conf/settings.ini
[main]
x = 1
EOF
""")
    (step,) = [s for s in p.steps if s.kind == "run"]
    sh(step.arg, tmp_path)
    assert (tmp_path / "app" / "conf" / "settings.ini").read_text() == "[main]\nx = 1\n"


def test_an_unclosed_heredoc_names_its_line(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match=r"line 2: heredoc <<EOF is never closed"):
        parse(tmp_path, "FROM a\nRUN <<EOF\necho\n")


def test_args_expand_in_from_and_reach_run_steps_only(tmp_path: Path) -> None:
    p = parse(tmp_path, """ARG BASE=python:3.12-slim
ARG TAG
FROM ${BASE} AS app
ARG BASE
ARG URL=https://example.invalid/${BASE}
ARG UNSET
ENV KEEP=1
RUN curl "$URL"
""")
    assert p.image == "python:3.12-slim"
    envs = [(s.arg, s.value, s.build_only) for s in p.steps if s.kind == "env"]
    assert envs == [("BASE", "python:3.12-slim", True), ("URL", "https://example.invalid/python:3.12-slim", True),
                    ("KEEP", "1", False)]
    assert p.env == {"KEEP": "1"}  # build args are not the image's environment


def test_multi_stage_build_follows_the_final_stages_chain(tmp_path: Path) -> None:
    p = parse(tmp_path, """FROM golang:1.22 AS build
WORKDIR /src
RUN go build -o /out/tool .
FROM debian:12 AS base
WORKDIR /srv
ENV MODE=prod
FROM base
COPY --from=build /out/tool /usr/local/bin/tool
COPY --from=0 /src/README /srv/
COPY app.py ./
""")
    assert [s.base for s in p.stages] == ["golang:1.22", "debian:12", "base"]
    assert p.stages[2].base_stage == 1 and p.image == "debian:12" and p.workdir == "/srv"
    assert p.env == {"MODE": "prod"}
    # the final image: its base stage's steps, then its own; the builder stage is not in it
    assert [(s.kind, s.arg, s.from_stage) for s in p.steps] == [
        ("workdir", "/srv", ""), ("env", "MODE", ""), ("copy", "/out/tool", "build"),
        ("copy", "/src/README", "build"), ("copy", "app.py", "")]
    assert p.base_images == ("golang:1.22", "debian:12")
    blockers = replay_blockers(p.steps)
    assert len(blockers) == 2 and blockers[0].startswith("Dockerfile line 8: COPY --from=build /out/tool")


def test_replay_refuses_what_it_cannot_honour_and_accepts_the_rest(tmp_path: Path) -> None:
    p = parse(tmp_path, """FROM python:3.12
RUN --mount=type=cache,target=/root/.cache pip install x
ADD https://example.invalid/data.csv /data/
ADD vendor.tar.gz /opt/
RUN --mount=type=secret,id=tok cat /run/secrets/tok
""")
    blockers = replay_blockers(p.steps)
    assert [b.split(":")[0] for b in blockers] == ["Dockerfile line 3", "Dockerfile line 4", "Dockerfile line 5"]
    assert "ADD of a URL" in blockers[0] and "archive" in blockers[1] and "--mount=type=secret" in blockers[2]
    env = Environment(image=p.image, build_steps=p.steps, dockerfile=tmp_path / "Dockerfile")
    with pytest.raises(DockerfileUnsupported, match=r"Dockerfile: Dockerfile line 3: COPY https://example.invalid"
                                                    r"/data.csv /data/: ADD of a URL .*\(and 2 more\)"):
        check_replayable(env)
    ok = parse(tmp_path, "FROM python:3.12\nRUN --mount=type=cache,target=/c echo hi\nCOPY a.txt /app/\n")
    check_replayable(Environment(image=ok.image, build_steps=ok.steps))  # nothing to refuse


def test_copy_sources_outside_the_context_are_errors(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match=r"line 2: COPY source '../etc' is outside the build context"):
        parse(tmp_path, "FROM a\nCOPY ../etc /x\n")
    # from another stage, an absolute source is normal
    p = parse(tmp_path, "FROM a AS b\nFROM c\nCOPY --from=b /etc/hosts /x\n")
    assert p.steps[0].arg == "/etc/hosts"
