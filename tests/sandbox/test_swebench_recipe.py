"""The SWE-bench stand-in recipe (farm/sandbox/images/swebench/recipe.py): read from the swebench
package, not re-typed; the one line of its repository script that changes; what each layer's
Dockerfile does for old and new Pythons; and that every input shows in a layer's tag."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from farm.errors import ConfigError
from farm.sandbox.images.swebench import recipe
from farm.sandbox.images.swebench.python import PythonPrefix

CLONE = "git clone -o origin https://github.com/o/calc /testbed"


def _spec(repo_lines: list[str] | None = None, env: str = "#!/bin/bash\nconda create -n testbed python=3.9 -y\n"):
    lines = repo_lines if repo_lines is not None else [CLONE, "cd /testbed", "git remote remove origin"]
    return SimpleNamespace(instance_id="o__calc-1", repo="o/calc", version="0.1", setup_env_script=env,
                           install_repo_script="#!/bin/bash\nset -euxo pipefail\n" + "\n".join(lines) + "\n")


def test_the_apt_packages_come_from_the_packages_own_base_dockerfile() -> None:
    pkgs = recipe.base_apt_packages()
    assert {"git", "build-essential", "locales", "python3"} <= set(pkgs)
    assert all(not p.startswith("-") and "\\" not in p for p in pkgs)


def test_the_clone_becomes_a_remote_and_nothing_else_changes() -> None:
    script = recipe.repo_script(_spec())
    assert "git clone" not in script
    want = "git -C /testbed remote add origin https://github.com/o/calc\ncd /testbed\ngit remote remove origin\n"
    assert want in script
    for lines in ([], [CLONE, CLONE]):
        with pytest.raises(ConfigError, match="`git clone` lines"):
            recipe.repo_script(_spec(lines))


def _env(minor: str, path: Path | None = Path("/root/.pyenv/versions/x")) -> recipe.Layer:
    base = recipe.Layer("localhost/farm-swebench/base:b", "FROM root\n", key="b")
    return recipe.env_layer(_spec(), base, PythonPrefix(minor + ".1", path))


def test_new_pythons_resolve_as_of_the_cutoff_old_ones_get_the_newest_pip_they_run() -> None:
    new = _env("3.9").dockerfile
    assert f"pip=={recipe.PIP_WITH_CUTOFF}" in new and f"ARG PIP_UPLOADED_PRIOR_TO={recipe.RESOLVE_AS_OF}" in new
    assert new.index("ARG PIP_UPLOADED_PRIOR_TO") < new.index("setup_env.sh")
    old = _env("3.6").dockerfile
    assert "PIP_UPLOADED_PRIOR_TO" not in old and f"pip=={recipe.OLD_PIPS['3.6']}" in old
    assert "ln -s /opt/farm/python/3.6 /root/.pyenv/versions/x" in old  # libpython where sysconfig says
    assert "ln -s" not in _env("3.8").dockerfile
    debian = _env("3.11", None).dockerfile
    assert "python3.11 -m venv --copies /opt/farm/python/3.11" in debian and "COPY python" not in debian


def test_the_instance_gets_the_scm_version_and_the_cutoff_as_build_arguments_only() -> None:
    env = _env("3.9")
    inst = recipe.instance_layer(_spec(), {"base_commit": "c" * 40}, env, PythonPrefix("3.9.1", Path("/p")),
                                 "docker.io/swebench/x:latest", "4.0.3", "4.5.1.dev3+gabc")
    text = inst.dockerfile
    assert "ARG SETUPTOOLS_SCM_PRETEND_VERSION=4.5.1.dev3+gabc" in text and "ARG PIP_UPLOADED_PRIOR_TO" in text
    assert "ENV SETUPTOOLS" not in text and "ENV PIP_UPLOADED" not in text
    assert "LABEL io.farm.standin=true" in text and f"LABEL {recipe.RECIPE_LABEL}={inst.key}" in text
    assert inst.tag == "docker.io/swebench/x:latest"


def test_every_input_shows_in_the_layer_key() -> None:
    env = _env("3.9")
    keys = {recipe.instance_layer(_spec(), {"base_commit": c}, env, PythonPrefix("3.9.1", Path("/p")), "t", "4.0.3",
                                  scm, tag).key
            for c, scm, tag in (("a" * 40, None, None), ("b" * 40, None, None), ("a" * 40, "1.0", None),
                                ("a" * 40, None, "v1.0"))}
    assert len(keys) == 4  # a version tag on the checkout is a different image
    base = recipe.Layer("b", "FROM root\n", key="b")
    other_base = recipe.Layer("b2", "FROM root\n", key="b2")
    py = PythonPrefix("3.9.1", Path("/p"))
    envs = {recipe.env_layer(_spec(env=e), b, p).tag for e, b, p in (
        ("x", base, py), ("y", base, py), ("x", other_base, py), ("x", base, PythonPrefix("3.9.2", Path("/p"))))}
    assert len(envs) == 4
