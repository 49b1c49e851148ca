"""What an instance's image recipe needs, read from base/instance Dockerfiles written in the shape
of SWE-bench_Pro-os's (farm/tasks/swebench_pro/recipes.py), and the census script over a scripts
copy and a repository mirror the test makes (scripts/swebench_pro_census.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from farm.tasks.swebench_pro.recipes import read_recipe, split_id, unreachable

ENV = "e" * 40
BASE = "b" * 40
FIX = "f" * 40
IID = f"instance_acme__web-app-{FIX}-v{ENV}"

BASE_DOCKERFILE = f"""FROM 123456789012.dkr.ecr.us-west-2.amazonaws.com/docker-hub/library/python:3.12.2-slim-bookworm
RUN mkdir /app
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends \\
    git \\
    # X for the browser tests
    xvfb \\
    libpq-dev \\
    && rm -rf /var/lib/apt/lists/*
RUN curl -fsSL https://deb.nodesource.com/setup_18.x | bash - && apt-get install -y nodejs
RUN wget -q https://dl.example.com/tool.zip
RUN git clone https://github.com/acme/web-app.git .
RUN git checkout {ENV}
"""

INSTANCE_DOCKERFILE = f"""FROM base_acme
ENV PYTEST_ADDOPTS="-v"
RUN cat <<'EOFPREP' > /preprocess.sh
cd /app
git reset --hard {BASE}
git clean -fdx
EOFPREP
RUN cat <<'EOFBUILD' > /build.sh
pip install pypi-timemachine
pypi-timemachine 2024-03-05 --port 9876 &
pip config set global.index-url http://127.0.0.1:9876/
npm install --no-audit
git submodule update --init --recursive
EOFBUILD
"""


def test_a_recipe_says_what_its_build_needs() -> None:
    r = read_recipe(IID, BASE_DOCKERFILE, INSTANCE_DOCKERFILE)
    assert r.base_image == "python:3.12.2-slim-bookworm" and r.python == "3.12"
    # a comment line inside the continued RUN does not cut the package list
    assert r.apt == ("git", "xvfb", "libpq-dev", "nodejs")
    assert (r.resolve_as_of, r.env_commit, r.base_commit) == ("2024-03-05", ENV, BASE)
    assert r.hosts == ("deb.nodesource.com", "dl.example.com", "github.com")
    assert r.npm and r.submodules
    # GitHub is served by the mirror; what is not reachable is named
    assert unreachable(r, {"dl.example.com"}) == ["deb.nodesource.com"]


@pytest.mark.parametrize("image,apt,python", [
    ("ubuntu:20.04", "python3.9 python3.9-dev", "3.9"),
    ("ubuntu:20.04", "python3-pip", "3.8"),
    ("ubuntu:22.04", "python3", "3.10"),
    ("python:3.8-slim", "python3.9", "3.8"),
    ("golang:1.22", "git", None),
])
def test_the_python_comes_from_the_image_else_the_apt_packages_else_ubuntus_default(
        image: str, apt: str, python: str | None) -> None:
    base = f"FROM {image}\nRUN apt-get update && apt-get install -y {apt}\n"
    assert read_recipe(IID, base, "").python == python


def test_instance_ids_split_into_repository_and_fix_commit() -> None:
    assert split_id(IID) == ("acme/web-app", FIX)
    assert split_id(f"instance_element-hq__element-web-{FIX}-vnan") == ("element-hq/element-web", FIX)
    assert split_id(f"instance_a__b-{FIX}") == ("a/b", FIX)
    assert split_id("instance_nope") is None


def _census_main():  # noqa: ANN202 - the script's main, loaded by path (scripts/ is not a package)
    script = Path(__file__).resolve().parents[3] / "scripts" / "swebench_pro_census.py"
    spec = importlib.util.spec_from_file_location("swebench_pro_census_under_test", script)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def _git(*args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@x", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_the_census_counts_recipes_and_commits_in_the_mirror(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    main = _census_main()
    # a mirror with one repository and three commits: env, base, fix of one instance
    repo = tmp_path / "mirror" / "acme+web-app"
    _git("init", "-q", str(repo))
    commits = []
    for n in range(3):
        (repo / "f").write_text(str(n))
        _git("-C", str(repo), "add", "f")
        _git("-C", str(repo), "commit", "-qm", str(n))
        commits.append(_git("-C", str(repo), "rev-parse", "HEAD"))
    env, base, fix = commits
    present = f"instance_acme__web-app-{fix}-v{env}"
    absent = f"instance_acme__web-app-{'0' * 40}-v{env}"
    other = f"instance_other__go-{'1' * 40}-vnan"
    scripts = tmp_path / "pro"
    for iid in (present, absent, other):
        for kind, text in (("base_dockerfile", BASE_DOCKERFILE.replace(ENV, env)),
                           ("instance_dockerfile", INSTANCE_DOCKERFILE.replace(BASE, base))):
            (scripts / "dockerfiles" / kind / iid).mkdir(parents=True)
            (scripts / "dockerfiles" / kind / iid / "Dockerfile").write_text(text)
        (scripts / "run_scripts" / iid).mkdir(parents=True)
    out = tmp_path / "census.json"
    assert main(["--scripts", str(scripts), "--repos", str(tmp_path / "mirror"), "--repo", "acme/web-app",
                 "--reachable", "dl.example.com", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| acme/web-app | 2 | 3.12 2 | 2024-03-05 … 2024-03-05 | deb.nodesource.com 2 | 2 | 2 | 1 |" in printed
    assert f"commits absent from the mirror: {absent}" in printed and present not in printed.split("|")[-1]
    facts = json.loads(out.read_text())
    assert list(facts) == ["acme/web-app"]
    assert sorted(i["instance_id"] for i in facts["acme/web-app"]["instances"]) == sorted([present, absent])
