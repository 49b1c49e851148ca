"""The SWE-bench Pro stand-in's layers, read from an instance's two Dockerfiles in the published
shape (farm/sandbox/images/swebench_pro/recipe.py), and the start path that builds one where the
published image is absent (farm/sandbox/images/ensure.py, check.py). No engine: the build itself
runs in tests/benchmarks/test_swebench_pro_path.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.sandbox.images import check, ensure
from farm.sandbox.images.swebench.python import PythonPrefix
from farm.sandbox.images.swebench_pro import build as pro_build
from farm.sandbox.images.swebench_pro.recipe import RECIPE_LABEL, env_layer, instance_layer, read_pro_recipe
from farm.tasks.model import Environment, Task, VerifierSpec
from tests.support.swebench_pro_instance import BASE_DOCKERFILE, INSTANCE_DOCKERFILE

ENV, BASE = "e" * 40, "b" * 40
IID = f"instance_farmtest__calc-{'f' * 40}-v{ENV}"


def _recipe(base: str = BASE_DOCKERFILE, instance: str = INSTANCE_DOCKERFILE):
    return read_pro_recipe(IID, base.format(env=ENV), instance.format(env=ENV, base=BASE, as_of="2024-03-15"))


def test_the_clone_goes_and_bookworm_names_come_in() -> None:
    r = _recipe()
    assert r.python == "3.11"
    # the repository comes from the mirror in the instance layer: no GitHub clone, no env checkout
    assert not any("git clone" in ln or "git checkout" in ln for ln in r.env_lines)
    assert r.env_lines[:2] == ["RUN mkdir /app", "WORKDIR /app"]
    apt = next(ln for ln in r.env_lines if "apt-get install" in ln)
    assert apt == "RUN apt-get update && apt-get install -y git libxslt1-dev && rm -rf /var/lib/apt/lists/*"
    assert (r.dropped_apt, r.mapped_apt) == (("qt5-default",), ("libxslt-dev->libxslt1-dev",))
    assert r.env_lines[-1] == 'ENTRYPOINT ["/bin/bash"]'
    # the date-pinned form of the environment checkout (qutebrowser's -vnan rows) goes the same way
    dated = BASE_DOCKERFILE.replace("RUN git checkout {env}", 'RUN LATEST_COMMIT=$(git rev-list -n 1 '
                                    '--before="2025-05-24" HEAD) && git reset --hard $LATEST_COMMIT')
    assert "LATEST_COMMIT" in dated and _recipe(base=dated).env_lines == r.env_lines


def test_heredocs_become_files_copied_in_and_everything_else_stays() -> None:
    r = _recipe()
    assert r.instance_lines[0] == 'ENV PYTEST_ADDOPTS="--tb=short -v"'
    assert "COPY files/preprocess.sh /preprocess.sh" in r.instance_lines
    assert r.instance_lines[-3:] == ["COPY files/build.sh /build.sh", "RUN chmod +x /build.sh", "RUN /build.sh"]
    build = r.files["files/build.sh"].decode()
    # build.sh runs as written: the time machine and its date included
    assert build.startswith("#!/bin/sh\npip install pypi-timemachine\npypi-timemachine 2024-03-15 --port 9876 &\n")
    assert build.endswith("pip install pytest\n")
    assert r.files["files/preprocess.sh"].decode().splitlines()[2] == f"git reset --hard {BASE}"


OPENLIBRARY_SHAPED = """FROM python:3.12.2-slim-bookworm
RUN mkdir /app
WORKDIR /app
RUN apt-get -qq update && apt-get install -y git libpq-dev nodejs npm && rm -rf /var/lib/apt/lists/*
RUN curl -fsSL https://deb.nodesource.com/setup_16.x | bash - && apt-get install -y nodejs
RUN wget -q -O - https://dl.google.com/linux/linux_signing_key.pub | apt-key add - && echo "deb [arch=amd64] \\
    http://dl.google.com/linux/chrome/deb/ stable main" > /etc/apt/sources.list.d/google-chrome.list \\
    && apt-get update && apt-get install -y google-chrome-stable xvfb && rm -rf /var/lib/apt/lists/*
RUN CHROMEDRIVER_VERSION="114.0.5735.90" && wget -O /tmp/c.zip "https://chromedriver.storage.googleapis.com/x.zip"
RUN git clone https://github.com/internetarchive/openlibrary.git .
RUN git submodule update --init --recursive
RUN git checkout {env}
"""


def test_unreachable_downloads_get_debians_own_or_go_and_the_submodules_wait_for_the_repository() -> None:
    r = read_pro_recipe(IID, OPENLIBRARY_SHAPED.format(env=ENV), "FROM x\nRUN /build.sh\n")
    assert r.python == "3.12"
    # NodeSource's node: Debian's nodejs and npm; Chrome's line: its other package (xvfb) only;
    # chromedriver: nothing
    assert r.env_lines[3:] == [
        "RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm && rm -rf /var/lib/apt/lists/*",
        "RUN apt-get update && apt-get install -y --no-install-recommends xvfb && rm -rf /var/lib/apt/lists/*"]
    assert r.after_clone == ["RUN git submodule update --init --recursive"]
    assert r.substituted == ("deb.nodesource.com: Debian's nodejs npm",
                             "dl.google.com: not installed (the line's other packages kept: xvfb)",
                             "chromedriver.storage.googleapis.com download dropped")
    env = env_layer(r, "internetarchive/openlibrary", "localhost/root", "sha256:1",
                    PythonPrefix("3.12.1", Path("/p/3.12.1")))
    inst = instance_layer(r, env, BASE, "t", "x", ["RUN side"], ["served from mirrors: a/b"])
    lines = inst.dockerfile.splitlines()
    # the mirrors first, then the base's submodule checkout, then the instance's own steps
    assert lines[lines.index("COPY app /app") + 2:][:3] == ["RUN side", "RUN git submodule update --init --recursive",
                                                             "RUN /build.sh"]
    diff = next(ln for ln in lines if "io.farm.standin.differences" in ln)
    assert "deb.nodesource.com: Debian's nodejs npm" in diff and "served from mirrors: a/b" in diff


@pytest.mark.parametrize("base,instance,match", [
    ("FROM golang:1.22\nRUN apt-get install -y git\n", "FROM x\n", "neither python:X.Y nor ubuntu:X"),
    ("FROM python:3.11-slim\nRUN wget -q https://dl.example.com/tool.zip\n", "FROM x\n", "downloads in 'RUN wget"),
    ("FROM python:3.11-slim\n", "FROM x\nRUN git submodule update --init\n", "runs 'RUN git submodule"),
    ("RUN true\n", "FROM x\n", "does not start with FROM"),
])
def test_what_the_stand_in_cannot_serve_is_refused_by_instance_and_instruction(base, instance, match) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        read_pro_recipe(IID, base, instance)
    assert IID in str(err.value)


def test_python_311_starts_from_the_slim_stand_in_and_others_get_a_cpython_prefix() -> None:
    r = _recipe()
    slim = env_layer(r, "farmtest/calc", "docker.io/library/python:3.11-slim", "sha256:1", None)
    assert slim.dockerfile.startswith("FROM docker.io/library/python:3.11-slim\n")
    assert "COPY python/" not in slim.dockerfile
    assert slim.tag.startswith("localhost/farm-swebench-pro/env.farmtest__calc")
    r39 = _recipe(base=BASE_DOCKERFILE.replace("python:3.11-slim", "python:3.9-slim"))
    assert r39.python == "3.9"
    prefix = PythonPrefix("3.9.18", Path("/p/3.9.18"))
    env = env_layer(r39, "farmtest/calc", "localhost/root", "sha256:1", prefix)
    text = env.dockerfile
    assert "COPY python/ /usr/local/" in text and "ln -s python3.9 python3" in text
    assert "exec /usr/local/bin/python3.9 -m pip" in text  # bare `pip`, as build.sh calls it
    assert "ENV PYTHON_VERSION=3.9.18" in text
    # the time machine a 3.9 installs no longer works: a working one on Debian's 3.11 answers build.sh
    assert "pypi-timemachine==0.3.1" in text and "pypi-timemachine==" not in slim.dockerfile
    inst = instance_layer(r39, env, BASE, "t", "x").dockerfile.splitlines()
    assert "RUN PATH=/opt/farm/bin:$PATH /build.sh" in inst and "RUN /build.sh" not in inst
    assert "RUN /build.sh" in instance_layer(r, slim, BASE, "t", "x").dockerfile.splitlines()
    # certificates are build arguments: the build's downloads trust them, the image's env does not carry them
    assert "ARG SSL_CERT_FILE=" in text and "ENV SSL_CERT_FILE" not in text
    # the key follows the inputs: another root image, another CPython, another layer
    assert env_layer(r39, "farmtest/calc", "localhost/root", "sha256:2", prefix).key != env.key
    assert env_layer(r39, "farmtest/calc", "localhost/root", "sha256:1",
                     PythonPrefix("3.9.19", Path("/p/3.9.19"))).key != env.key


def test_an_ubuntu_base_is_the_debian_root_with_the_python_its_apt_line_names() -> None:
    base = ("FROM 123.dkr.ecr.us-west-2.amazonaws.com/docker-hub/library/ubuntu:20.04\nRUN mkdir /app\n"
            "RUN apt-get update && apt-get install -y git python3.9 python3.9-dev python3-pip "
            "&& ln -sf /usr/bin/python3.9 /usr/bin/python3\n")
    r = read_pro_recipe(IID, base, "FROM x\n")
    assert (r.base_image, r.python, r.on_slim_311) == ("ubuntu:20.04", "3.9", False)
    assert r.dropped_apt == ("python3.9", "python3.9-dev")
    env = env_layer(r, "acme/app", "localhost/root", "sha256:1", PythonPrefix("3.9.18", Path("/p/3.9.18")))
    # the recipe's own link to /usr/bin/python3.9 then finds the prefix's interpreter
    assert "ln -sf /usr/local/bin/python3.9 /usr/bin/python3.9" in env.dockerfile
    assert env.dockerfile.splitlines()[-1] == ("RUN apt-get update && apt-get install -y git python3-pip "
                                               "&& ln -sf /usr/bin/python3.9 /usr/bin/python3")
    # Ubuntu 20.04's own python3 where the apt line names no other
    assert read_pro_recipe(IID, "FROM ubuntu:20.04\nRUN apt-get install -y python3 xvfb\n", "FROM x\n").python == "3.8"


def test_the_instance_layer_is_the_published_name_with_its_recipe_and_differences() -> None:
    r = _recipe()
    env = env_layer(r, "farmtest/calc", "docker.io/library/python:3.11-slim", "sha256:1", None)
    tag = "docker.io/jefzda/sweap-images:farmtest.calc-x"
    inst = instance_layer(r, env, BASE, tag, "python:3.11 is a stand-in")
    lines = inst.dockerfile.splitlines()
    assert inst.tag == tag and lines[0] == f"FROM {env.tag}"
    assert lines.index("COPY app /app") < lines.index("COPY files/preprocess.sh /preprocess.sh")
    assert f"LABEL {RECIPE_LABEL}={inst.key}" == lines[-1]
    assert set(inst.files) == {"files/preprocess.sh", "files/build.sh"}
    diff = next(ln for ln in lines if "io.farm.standin.differences" in ln)
    assert "qt5-default" in diff and "one-commit clone" in diff
    assert instance_layer(r, env, "c" * 40, tag, "x").key != inst.key  # another base commit, another image


ROW = {"instance_id": IID, "repo": "farmtest/calc", "base_commit": BASE, "dockerhub_tag": "farmtest.calc-x"}


def _task(**meta: object) -> Task:
    return Task(benchmark="swebench_pro", task_id=IID, instruction="", environment=Environment(),
                verifier=VerifierSpec(protocol="swebench_pro"), metadata={"swebench_pro": ROW, **meta})


def test_a_pro_task_with_a_mirror_and_recipes_builds_its_stand_in_where_absent(monkeypatch) -> None:
    calls = []

    async def inspect(binary, ref):
        return None

    async def build(binary, row, repos, scripts, **kw):
        calls.append((row["instance_id"], repos, scripts))
        return pro_build.BuiltInstance("t", "i", log="built")

    monkeypatch.setattr(ensure, "inspect_image", inspect)
    monkeypatch.setattr(pro_build, "ensure_pro_instance", build)
    task = _task(swebench_repos="/mirrors", swebench_pro_scripts="/pro", swebench_pythons=None)
    assert asyncio.run(ensure.build_bases("podman", task)) == "built"
    assert calls == [(IID, "/mirrors", "/pro")]
    # the image check counts it as built on start rather than absent
    assert check._swebench_base(task) == "jefzda/sweap-images:farmtest.calc-x"
    # without a mirror and recipes there is nothing to build: the task's FROM must be present
    assert asyncio.run(ensure.build_bases("podman", _task())) == ""
    assert check._swebench_base(_task()) is None and calls == [(IID, "/mirrors", "/pro")]


def test_a_missing_mirror_or_recipe_copy_is_a_named_build_error(tmp_path: Path) -> None:
    from farm.sandbox.base import SandboxStartError

    with pytest.raises(SandboxStartError, match="needs benchmark.repos .* and benchmark.pro_scripts"):
        asyncio.run(pro_build.ensure_pro_instance("podman", ROW, None, "/pro"))
    scripts = tmp_path / "pro" / "run_scripts" / IID
    scripts.mkdir(parents=True)
    (scripts / "parser.py").write_text("")
    with pytest.raises(SandboxStartError, match=f"has no dockerfiles/\\*/{IID}/Dockerfile") as err:
        asyncio.run(pro_build.ensure_pro_instance("podman", ROW, str(tmp_path), str(tmp_path / "pro")))
    assert err.value.reason == "image_build"
