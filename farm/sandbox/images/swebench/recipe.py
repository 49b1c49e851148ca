"""The three layers of a SWE-bench instance stand-in, from the ``swebench`` package's own scripts.

SWE-bench builds base -> environment -> instance images; farm keeps the layering (one environment
image serves every instance of the same repository/version) and runs the package's own
``setup_env.sh`` and ``setup_repo.sh`` unchanged but for one line, with these differences, all
recorded on the image (``io.farm.standin.differences``):

* the base is a Debian bookworm root (``make images``) with the apt packages of the package's
  base Dockerfile, not Ubuntu 22.04, and no miniconda: a small ``conda`` stand-in
  (``shim/``) creates environments as full copies of a CPython prefix (farm/sandbox/images/swebench/python.py)
  and installs conda specs with pip (conda-only names mapped in ``shim/conda-to-pip.json``);
* the repository comes from the local mirror as a one-commit clone of ``base_commit`` (the
  script's ``git clone`` of GitHub becomes ``git remote add``): no later commit is in the
  image's history, where SWE-bench's own images keep the whole clone; the base commit carries
  the version tag an upstream ``git describe`` names (farm/tasks/swebench/mirror.py
  ``version_tag``), so that version tools (setuptools-scm) read a version at eval time too;
* packages resolve from PyPI as uploaded before :data:`RESOLVE_AS_OF` (pip's
  ``--uploaded-prior-to``, given to the builds only), which pip can do from Python 3.9 on; the
  environments of older Pythons resolve as of the build (few new releases still support them).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.errors import ConfigError
from farm.sandbox.images.swebench.python import PythonPrefix

SHIM_DIR = Path(__file__).resolve().parent / "shim"
DEFAULT_ROOT = "localhost/farm-standin-root:bookworm"
TAG_PREFIX = "localhost/farm-swebench"
RECIPE_LABEL = "io.farm.swebench.recipe"
PYTHON_LABEL = "io.farm.swebench.python"
FORMAT = 1  # bump when a layer's recipe changes in a way its inputs do not show
# SWE-bench Verified's publication (2024-08-13): what its images resolved to, not today's releases
# (docutils 0.22 dropped docutils.utils.roman and broke every sphinx instance built without it)
RESOLVE_AS_OF = "2024-08-13T00:00:00Z"
PIP_WITH_CUTOFF = "26.0.1"  # the first pip with --uploaded-prior-to; needs Python >= 3.9
# the last pip each older Python runs: a pyenv 3.6 comes with pip 18.1, which lacks options the
# package's install commands use (scikit-learn's --no-use-pep517); conda's environments had newer ones
OLD_PIPS = {"3.5": "20.3.4", "3.6": "21.3.1", "3.7": "24.0", "3.8": "25.0.1"}
# what the conda stand-in needs besides the package's list
EXTRA_APT = ("python3-yaml", "adduser", "ca-certificates", "patch")
DIFFERENCES = (
    "farm stand-in for a SWE-bench instance image, built from swebench {version}'s scripts: Debian bookworm "
    "root instead of Ubuntu 22.04; no miniconda (environments are copies of CPython {python}, conda specs "
    "installed with pip); the repository is a one-commit clone of base_commit from a local mirror (no later "
    "history); packages resolved from PyPI as uploaded before {as_of} where the Python is 3.9 or later, as of "
    "the build otherwise"
)


@dataclass(frozen=True)
class Layer:
    """One image to build: its tag, Dockerfile, and the files of its build context."""

    tag: str
    dockerfile: str
    files: dict[str, bytes] = field(default_factory=dict)  # context path -> content
    key: str = ""  # the recipe hash (also the tag's suffix, or a label where the tag is fixed)


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256(f"farm-swebench v{FORMAT}\0".encode())
    for p in parts:
        h.update((p.encode() if isinstance(p, str) else p) + b"\0")
    return h.hexdigest()[:16]


def base_apt_packages() -> list[str]:
    """The apt packages the package's Python base Dockerfile installs (read from it, not re-typed).

    Raises:
        ConfigError: the template no longer has the ``apt install -y`` block this reads.
    """
    from swebench.harness.dockerfiles.python import _DOCKERFILE_BASE_PY

    m = re.search(r"apt install -y \\\n(.*?)&& rm -rf", _DOCKERFILE_BASE_PY, re.S)
    if m is None:
        raise ConfigError("swebench's base Dockerfile has no `apt install -y` block: "
                          "farm's reading of it needs updating")
    return [w for w in re.split(r"[\s\\]+", m.group(1)) if w]


def host_cas(src: Path = Path("/usr/local/share/ca-certificates")) -> dict[str, bytes]:
    """Locally added CA certificates (a site TLS proxy's): pip inside the build must trust them."""
    return {p.name: p.read_bytes() for p in sorted(src.glob("*.crt"))} if src.is_dir() else {}


def base_layer(root: str, root_id: str) -> Layer:
    cas = host_cas()
    shim = {name: (SHIM_DIR / name).read_bytes() for name in ("activate", "conda")}
    pkgs = sorted(set(base_apt_packages()) | set(EXTRA_APT))
    lines = [
        f"FROM {root}",
        "ARG DEBIAN_FRONTEND=noninteractive",
        "ENV TZ=Etc/UTC",
        *(["COPY host-ca/ /usr/local/share/ca-certificates/"] if cas else []),
        f"RUN apt-get update && apt-get install -y --no-install-recommends {' '.join(pkgs)} "
        "&& update-ca-certificates && rm -rf /var/lib/apt/lists/*",
        # old pips bundle their own CA list; the system store holds the site's proxy CA too
        "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
        "COPY shim/activate /opt/miniconda3/bin/activate",
        "COPY shim/activate /opt/miniconda3/etc/profile.d/conda.sh",
        "COPY shim/conda /opt/miniconda3/bin/conda",
        "RUN chmod 755 /opt/miniconda3/bin/conda && mkdir -p /opt/miniconda3/envs /opt/farm/python",
        "ENV PATH=/opt/miniconda3/bin:$PATH",
        "RUN conda init --all && conda config --append channels conda-forge",
        "RUN adduser --disabled-password --gecos 'dog' nonroot",
    ]
    files = {f"shim/{k}": v for k, v in shim.items()} | {f"host-ca/{k}": v for k, v in cas.items()}
    text = "\n".join(lines) + "\n"
    key = _digest(text, root_id, *(k.encode() + v for k, v in sorted(files.items())))
    return Layer(f"{TAG_PREFIX}/base:{key}", text, files, key=key)


def env_layer(test_spec: Any, base: Layer, python: PythonPrefix) -> Layer:
    """The environment image: the package's ``setup_env.sh`` run on the base with CPython copied in."""
    script = test_spec.setup_env_script
    # a given prefix is copied in; Debian's python3.X becomes a venv with copied binaries, which the
    # conda stand-in copies like a prefix (its pyvenv.cfg points at /usr/bin, so the copy still runs)
    python_in = (f"COPY python /opt/farm/python/{python.minor}" if python.path is not None else
                 f"RUN apt-get update && apt-get install -y --no-install-recommends python{python.minor}-venv "
                 f"python{python.minor}-dev && rm -rf /var/lib/apt/lists/* && "
                 f"python{python.minor} -m venv --copies /opt/farm/python/{python.minor}")
    table = (SHIM_DIR / "conda-to-pip.json").read_bytes()
    text = "\n".join([
        f"FROM {base.tag}",
        python_in,
        *_old_prefix(python),
        *_cutoff(python),
        # the conda-to-pip table lives here, not in the base: a new entry rebuilds environments only
        "COPY conda-to-pip.json /opt/miniconda3/conda-to-pip.json",
        "COPY setup_env.sh /root/",
        "RUN sed -i -e 's/\\r$//' /root/setup_env.sh && chmod +x /root/setup_env.sh",
        'RUN /bin/bash -c "source ~/.bashrc && /root/setup_env.sh"',
        "WORKDIR /testbed/",
        'RUN echo "source /opt/miniconda3/etc/profile.d/conda.sh && conda activate testbed" > /root/.bashrc',
        f"LABEL {PYTHON_LABEL}={python.version}:{python.path or 'debian-venv'}",
    ]) + "\n"
    key = _digest(text, base.key, script, python.version, table)
    repo = test_spec.repo.replace("/", "__").lower()
    return Layer(f"{TAG_PREFIX}/env.{repo}.{test_spec.version}:{key}", text,
                 {"setup_env.sh": script.encode(), "conda-to-pip.json": table}, key=key)


def _old_prefix(python: PythonPrefix) -> list[str]:
    """Below 3.8, distutils links every C extension against libpython from the directory the
    interpreter was built for (its sysconfig's LIBDIR, e.g. /root/.pyenv/versions/3.6.15/lib):
    that path, linked to the copy, so that compiling psutil and friends finds it."""
    if python.path is None or tuple(int(x) for x in python.minor.split(".")) >= (3, 8):
        return []
    return [f"RUN mkdir -p {python.path.parent} && ln -s /opt/farm/python/{python.minor} {python.path}"]


def _cutoff(python: PythonPrefix) -> list[str]:
    """Dockerfile lines that make the layer's pip resolve as of :data:`RESOLVE_AS_OF`: a pip that
    can, in the copied prefix, then the date as a build argument (never in the running container).
    Pythons older than 3.9 get the newest pip they run, and no cut-off."""
    pip = f"/opt/farm/python/{python.minor}/bin/python -m pip"
    if python.minor in OLD_PIPS:  # no cut-off, but a pip as new as the Python allows (conda's are)
        return [f"RUN {pip} install --disable-pip-version-check --no-cache-dir -q pip=={OLD_PIPS[python.minor]}"]
    return [f"RUN {pip} install --disable-pip-version-check --no-cache-dir -q pip=={PIP_WITH_CUTOFF}",
            f"ARG PIP_UPLOADED_PRIOR_TO={RESOLVE_AS_OF}"]


def repo_script(test_spec: Any) -> str:
    """The package's ``setup_repo.sh`` with its GitHub clone replaced by the mirror's checkout.

    Raises:
        ConfigError: the script does not start its work with the clone this replaces.
    """
    lines = test_spec.install_repo_script.splitlines()
    clone = re.compile(r"^git clone -o origin (https://github\.com/\S+) (/\S+)$")
    hits = [i for i, line in enumerate(lines) if clone.match(line)]
    if len(hits) != 1:
        raise ConfigError(f"{test_spec.instance_id}: swebench's setup_repo.sh has {len(hits)} `git clone` lines; "
                          "farm replaces exactly one with the mirror's checkout")
    m = clone.match(lines[hits[0]])
    assert m is not None
    # the checkout is already at /testbed (COPY); the remote the script removes next must exist
    lines[hits[0]] = f"git -C {m.group(2)} remote add origin {m.group(1)}"
    return "\n".join(lines) + "\n"


def instance_layer(test_spec: Any, row: dict[str, Any], env: Layer, python: PythonPrefix, tag: str,
                   swebench_version: str, scm_version: str | None = None, version_tag: str | None = None) -> Layer:
    """The instance image, tagged as the published one it stands in for.

    ``scm_version``: what setuptools-scm would call the base commit in a full clone (the mirror's
    tags), given to the build's install as a build argument only. ``version_tag``: the tag the
    checkout carries on the base commit (staged by the build), so that the eval script's own
    reinstall describes a version too; a label says which, and puts it in the recipe's key.
    """
    script = repo_script(test_spec)
    diff = DIFFERENCES.format(version=swebench_version, python=python.version, as_of=RESOLVE_AS_OF)
    text = "\n".join([
        f"FROM {env.tag}",
        "COPY testbed /testbed",
        "COPY setup_repo.sh /root/",
        *([f"ARG SETUPTOOLS_SCM_PRETEND_VERSION={scm_version}"] if scm_version else []),
        *_cutoff(python)[1:],
        "RUN sed -i -e 's/\\r$//' /root/setup_repo.sh",
        "RUN /bin/bash /root/setup_repo.sh",
        "WORKDIR /testbed/",
        "LABEL io.farm.standin=true",
        f"LABEL io.farm.standin.differences={json.dumps(diff)}",
        *([f"LABEL io.farm.standin.version_tag={json.dumps(version_tag)}"] if version_tag else []),
    ]) + "\n"
    key = _digest(text, env.key, script, row["base_commit"])
    return Layer(tag, text + f"LABEL {RECIPE_LABEL}={key}\n", {"setup_repo.sh": script.encode()}, key=key)
