"""Which RUN steps the engine's build runs with pipefail, and what the wrapped step does under
the shells a Debian image has (dash as /bin/sh, bash), run here for real."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from farm.run.rows import fill_image
from farm.sandbox.base import ImageProvenance
from farm.sandbox.images.ensure import failing_step
from farm.sandbox.pipefail import original_step, strict_dockerfile, strict_run
from farm.store.schema import TrialResult

DOCKERFILE = """\
# syntax=docker/dockerfile:1
FROM debian:bookworm AS tools
RUN curl -LsSf https://example.invalid/install.sh \\
    | sh
RUN a || b
RUN ["sh", "-c", "x | y"]
RUN --mount=type=cache,target=/root/.cache pip download x | tee log
RUN <<EOF
false | true
EOF
FROM tools
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN keep | this
FROM debian:bookworm
RUN wrap | this
"""


def test_only_shell_form_runs_with_a_pipe_are_wrapped(tmp_path: Path) -> None:
    df = tmp_path / "Dockerfile"
    df.write_text(DOCKERFILE)
    text = strict_dockerfile(df)
    assert text is not None
    lines = text.splitlines()
    assert lines[0] == "# syntax=docker/dockerfile:1"  # a parser directive stays first
    runs = [line for line in lines if line.startswith("RUN")]
    assert [original_step(r) for r in runs] == [
        "RUN curl -LsSf https://example.invalid/install.sh      | sh",
        "RUN a || b", 'RUN ["sh", "-c", "x | y"]',
        "RUN --mount=type=cache,target=/root/.cache pip download x | tee log",
        "RUN <<EOF", "RUN keep | this", "RUN wrap | this"]
    wrapped = [r for r in runs if r != original_step(r)]
    assert len(wrapped) == 3 and "RUN keep | this" in runs  # after SHELL (inherited by FROM tools): as written
    assert wrapped[1].startswith("RUN --mount=type=cache,target=/root/.cache set -- ")
    assert "false | true\nEOF\n" in text  # a heredoc's body is kept
    df.write_text("FROM debian\nRUN a && b\n")
    assert strict_dockerfile(df) is None  # nothing to change: the task's own file is built


def test_a_build_log_names_the_step_as_the_dockerfile_wrote_it() -> None:
    log = f"STEP 1/2: FROM base\nSTEP 2/2: RUN {strict_run('false | true')}\nError: building at STEP"
    assert failing_step(log) == "RUN false | true"


@pytest.mark.tools("dash", "bash")
@pytest.mark.parametrize("command,code", [("false | true", 1), ("true | false", 1), ("echo it's | cat", 2),
                                          ("printf '%s\\n' \"$1\" | grep -c '^$'", 0)])
def test_the_wrapped_step_fails_when_any_command_of_its_pipe_fails(command: str, code: int) -> None:
    if not Path("/bin/bash").is_file():
        pytest.skip("needs /bin/bash (the wrapper looks for it there, as in an image)")
    # as a Debian image's RUN runs it: `/bin/sh -c`, with /bin/sh = dash
    done = subprocess.run(["dash", "-c", strict_run(command)], capture_output=True, text=True, timeout=30)
    plain = subprocess.run(["dash", "-c", command], capture_output=True, text=True, timeout=30)
    assert done.returncode == code and done.stdout == plain.stdout, (done, plain)


def test_a_row_names_the_reference_that_ran() -> None:
    row = TrialResult(run_id="r", trial_key="k", benchmark="b", task_id="t", seed=0, arm="a", attempt=1,
                      model=None, status="infra_error", image="reg.example/x@sha256:" + "1" * 64)
    fill_image(row, ImageProvenance("host"))
    assert row.image == "reg.example/x@sha256:" + "1" * 64  # nothing ran under another name
    fill_image(row, ImageProvenance("built", "sha256:" + "2" * 64, 3.0, ref="localhost/farm-task/b-t:0123"))
    assert (row.image, row.image_id, row.image_source) == ("localhost/farm-task/b-t:0123", "sha256:" + "2" * 64,
                                                           "built")
