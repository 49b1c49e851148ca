"""What a SWE-bench Pro instance's image recipe needs, read from its two Dockerfiles.

The published images (``jefzda/sweap-images``) are built from ``dockerfiles/base_dockerfile/<id>``
(a base OS or ``python:*`` image, apt packages, a ``git clone`` of the repository at the
environment commit) and ``dockerfiles/instance_dockerfile/<id>`` (``/preprocess.sh`` resetting to
the base commit, ``/build.sh`` installing through ``pypi-timemachine <date>``). A stand-in built
here has to replace each thing the recipe reaches that this machine cannot; this module lists
them, so a census (scripts/swebench_pro_census.py) and a future builder read the same facts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlparse

# where every base Dockerfile clones from: served by a repository mirror (benchmark.repos) instead
GIT_HOST = "github.com"
# Ubuntu releases' default python3, for bases that install no other
_UBUNTU_PYTHON = {"20.04": "3.8", "22.04": "3.10", "24.04": "3.12"}


@dataclass(frozen=True)
class Recipe:
    instance_id: str
    base_image: str  # the base Dockerfile's FROM, registry mirror prefix removed
    python: str | None  # major.minor the tests run under, when the recipe says
    apt: tuple[str, ...]  # packages named by apt-get install, in order, without duplicates
    resolve_as_of: str | None  # pypi-timemachine's date (PyPI as of then)
    env_commit: str | None  # what the base image checks out
    base_commit: str | None  # what /preprocess.sh resets to
    hosts: tuple[str, ...]  # hosts the build downloads from (besides the local timemachine)
    npm: bool  # runs npm install / npx
    submodules: bool  # runs git submodule (init, update)


def _joined(text: str) -> str:
    # comment lines go first, as Docker drops them even inside a continued instruction
    text = re.sub(r"^[ \t]*#[^\n]*\n", "", text, flags=re.M)
    return re.sub(r"\\\n", " ", text)


def _apt(text: str) -> list[str]:
    names: list[str] = []
    for m in re.finditer(r"apt-get install([^&;|\n]*)", _joined(text)):
        for word in m.group(1).split():
            if not word.startswith("-") and re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", word) and word not in names:
                names.append(word)
    return names


def _image(text: str) -> str:
    m = re.search(r"^FROM\s+(\S+)", text, re.M)
    image = m.group(1) if m else ""
    # Scale's ECR mirror of Docker Hub: the same official image
    return re.sub(r"^[0-9]+\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com/docker-hub/(library/)?", "", image)


def _python(image: str, apt: list[str]) -> str | None:
    m = re.match(r"(?:library/)?python:(\d+\.\d+)", image)
    if m:
        return m.group(1)
    versions = [n[len("python"):] for n in apt if re.fullmatch(r"python3\.\d+", n)]
    if versions:
        return versions[0]
    m = re.match(r"(?:library/)?ubuntu:(\d+\.\d+)", image)
    return _UBUNTU_PYTHON.get(m.group(1)) if m else None


def read_recipe(instance_id: str, base: str, instance: str) -> Recipe:
    """The facts of one instance's recipe from its base and instance Dockerfile texts."""
    both = base + "\n" + instance
    apt = _apt(both)
    image = _image(base)
    hosts: list[str] = []
    for url in re.findall(r"https?://[^\s\"')]+", both):
        host = urlparse(url).hostname or ""
        if host and host not in ("127.0.0.1", "localhost") and host not in hosts:
            hosts.append(host)
    date = re.search(r"pypi-timemachine\s+(\d{4}-\d{2}-\d{2})", instance)
    env = re.search(r"^RUN git checkout ([0-9a-f]{40})", base, re.M)
    reset = re.search(r"git reset --hard ([0-9a-f]{40})", instance)
    return Recipe(instance_id=instance_id, base_image=image, python=_python(image, apt), apt=tuple(apt),
                  resolve_as_of=date.group(1) if date else None, env_commit=env.group(1) if env else None,
                  base_commit=reset.group(1) if reset else None, hosts=tuple(hosts),
                  npm=bool(re.search(r"\bnpm (?:install|ci)\b|\bnpx\b", both)),
                  submodules="git submodule" in both)


def unreachable(recipe: Recipe, reachable: set[str]) -> list[str]:
    """The hosts the recipe downloads from that are not in ``reachable`` (GitHub excepted: the
    repository comes from a mirror)."""
    return [h for h in recipe.hosts if h != GIT_HOST and h not in reachable]


_ID = re.compile(r"^instance_(?P<owner>.+?)__(?P<name>.+)-(?P<fix>[0-9a-f]{40})(?:-v(?:[0-9a-f]{40}|nan))?$")


def split_id(instance_id: str) -> tuple[str, str] | None:
    """``(owner/name, fix commit)`` from an instance id, or None when it is not of that form."""
    m = _ID.match(instance_id)
    return (f"{m.group('owner')}/{m.group('name')}", m.group("fix")) if m else None
