"""The two layers of a SWE-bench Pro instance stand-in, from the instance's own Dockerfiles.

SWE-bench Pro publishes each instance's recipe (scaleapi/SWE-bench_Pro-os,
``dockerfiles/{base,instance}_dockerfile/<id>/Dockerfile``): a base image (``python:X.Y[-slim]``),
apt packages and a full ``git clone`` of GitHub at the environment commit; then ``/preprocess.sh``
(reset to the base commit) and ``/build.sh`` (pip through ``pypi-timemachine <date>``). farm keeps
both texts and runs them here with these differences, all recorded on the image
(``io.farm.standin.differences``):

* ``python:3.11*`` is farm's Debian stand-in of ``python:3.11-slim`` (scripts/standin_images.py);
  another ``python:X.Y`` (or ``ubuntu:X``, with the Python its apt line names) is the Debian
  bookworm root (``make images``) with a CPython X.Y prefix (``benchmark.pythons``) copied to
  ``/usr/local`` as the official images lay it out;
* the environment layer drops the ``git clone`` / ``git checkout`` lines: the instance layer
  brings the repository from the local mirror as a one-commit clone of the base commit, so no
  later commit (the fix) is in the image, where upstream's full clone carries it; grading makes
  the fix commit's test files from ``test_patch`` (farm/tasks/swebench_pro/task_dir.py);
* the ``RUN cat <<EOF > /file`` heredocs become files copied in (podman 4's builder has no
  heredocs); ``build.sh`` runs unchanged, ``pypi-timemachine`` included, so its pip resolves as of
  the recipe's date; the two installs before the time machine starts resolve as of the build, as
  upstream's did as of theirs; below Python 3.11 a working time machine answers instead
  (:data:`TIMEMACHINE`);
* apt names bookworm lacks are dropped or mapped (:data:`APT_SUBSTITUTES`); downloads from hosts
  this machine cannot reach get Debian's own or go (:data:`UNREACHABLE`); other GitHub
  repositories the build fetches come from mirrors (farm/sandbox/images/swebench_pro/side.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from farm.errors import ConfigError
from farm.sandbox.images.swebench.python import PythonPrefix
from farm.sandbox.images.swebench.recipe import Layer, host_cas
from farm.tasks.swebench_pro.recipes import read_recipe

TAG_PREFIX = "localhost/farm-swebench-pro"
RECIPE_LABEL = "io.farm.swebench_pro.recipe"
IMAGE_PREFIX = "docker.io/"  # the row's image, jefzda/sweap-images:<tag>, as podman names it locally
FORMAT = 1  # bump when a layer's recipe changes in a way its inputs do not show
# farm's Debian stand-in of this official image (scripts/standin_images.py) stands in for python:3.11*
SLIM_311 = "docker.io/library/python:3.11-slim"
# apt names the bookworm archive lacks: a replacement, or None (dropped; recorded)
APT_SUBSTITUTES: dict[str, str | None] = {
    "libxslt-dev": "libxslt1-dev",  # a virtual name apt cannot install by itself
    "qt5-default": None,  # gone after buster; PyQt wheels bundle Qt
    "python3.9": None, "python3.9-dev": None, "python3.9-venv": None,  # the CPython prefix stands in
    "google-chrome-stable": None,  # dl.google.com is not reachable
}
# what the official python:X.Y-slim images hold besides the interpreter: certificates, time zones, and
# the shared libraries a CPython build links against (its _ssl, _sqlite3, _ctypes, ... modules)
PYTHON_RUNTIME = ("ca-certificates", "netbase", "tzdata", "libssl3", "libsqlite3-0", "libffi8", "libbz2-1.0",
                  "liblzma5", "libreadline8", "libncursesw6", "libgdbm6", "libuuid1", "libexpat1", "zlib1g")
# what a base Dockerfile may hold besides apt, ENV, WORKDIR and the entry point: the clone (dropped)
_CLONE = re.compile(r"^RUN git clone (?:--\S+ )*https://github\.com/\S+? \.$")
# the base's submodule checkout runs once the repository is there (the instance layer), through mirrors
_SUBMODULES = re.compile(r"^RUN git submodule update(?: --\S+)*$")
# downloads from hosts this machine cannot reach, and what stands in: the apt packages the same line
# installs (but the unreachable ones), plus Debian's own for the tool it fetched (None: nothing)
UNREACHABLE: dict[str, tuple[str, ...] | None] = {
    "deb.nodesource.com": ("nodejs", "npm"),  # NodeSource's node 16 / LTS: Debian's nodejs 18 and npm
    "dl.google.com": (),  # Google Chrome: not installed (no selected test drives a browser)
    "chromedriver.storage.googleapis.com": None,
    "storage.googleapis.com/chrome-for-testing": None,
}
# the environment commit: a checkout, or the clone reset to its last commit before a date
_CHECKOUT = re.compile(r"^RUN (?:git checkout [0-9a-f]{40}|LATEST_COMMIT=\$\(git rev-list -n 1 --before=\S+ HEAD\) "
                       r"&& git reset --hard \$LATEST_COMMIT)$")
# the time machine that answers build.sh where the recipe's Python is older than 3.11 (ProRecipe.old_python)
TIMEMACHINE = "0.3.1"
_TM_VENV, _TM_BIN = "/opt/farm/timemachine", "/opt/farm/bin"
# the system store (which trusts a site TLS proxy's CA where there is one) for the build's own
# downloads: pip's, the time machine's (httpx), npm's; build arguments, so not in the image's env
_CERT_ARGS = [f"ARG {name}=/etc/ssl/certs/ca-certificates.crt"
              for name in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")]
_HEREDOC = re.compile(r"^RUN cat <<'?(\w+)'? > (/[\w./-]+)$")


@dataclass(frozen=True)
class ProRecipe:
    """An instance's two Dockerfiles, rewritten for the stand-in."""

    instance_id: str
    python: str  # X.Y of the base image
    env_lines: list[str]  # the base Dockerfile's instructions after FROM, clone and checkout removed
    instance_lines: list[str]  # the instance Dockerfile's after FROM, heredocs as COPY lines
    files: dict[str, bytes] = field(default_factory=dict)  # what the heredocs wrote: context path -> content
    dropped_apt: tuple[str, ...] = ()
    mapped_apt: tuple[str, ...] = ()  # "old->new"
    after_clone: list[str] = field(default_factory=list)  # base instructions that need the repository (submodules)
    substituted: tuple[str, ...] = ()  # what stands in for downloads from unreachable hosts
    base_image: str = ""  # python:X.Y[-variant] or ubuntu:X, registry mirror prefix removed

    @property
    def old_python(self) -> bool:
        """Older than the oldest Python the working pypi-timemachine runs on (3.11)."""
        return tuple(int(x) for x in self.python.split(".")) < (3, 11)

    @property
    def on_slim_311(self) -> bool:
        """Built on farm's stand-in of python:3.11-slim (else the Debian root and a CPython prefix)."""
        return self.python == "3.11" and self.base_image.startswith("python:")


def _instructions(text: str) -> list[str]:
    """The Dockerfile's instructions, one per item, continuations joined, comments dropped;
    a heredoc body stays on its own lines after its ``RUN cat`` line (ended by the delimiter)."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _HEREDOC.match(line.strip())
        if m:
            body = []
            while i < len(lines) and lines[i].strip() != m.group(1):
                body.append(lines[i])
                i += 1
            i += 1  # the delimiter
            out.append(line.strip() + "\n" + "\n".join(body) + "\n")
            continue
        while line.endswith("\\") and i < len(lines):
            nxt = lines[i].rstrip()
            i += 1
            if nxt.lstrip().startswith("#"):
                continue
            line = line[:-1].rstrip() + " " + nxt.strip()
        out.append(" ".join(line.split()))
    return out


def _python_of(base: str, instance_id: str) -> tuple[str, str]:
    """(image, X.Y): the base image without Scale's registry mirror, and the Python its tests run
    under (the image's, else the apt package's, else the Ubuntu release's default)."""
    recipe = read_recipe(instance_id, base, "")
    image = recipe.base_image.removeprefix("library/")
    if recipe.python is None or not re.match(r"^(python|ubuntu):", image):
        raise ConfigError(f"{instance_id}: its base image {image!r} is neither python:X.Y nor ubuntu:X with a Python; "
                          "farm's SWE-bench Pro stand-ins start from those only")
    return image, recipe.python


def _apt_line(line: str) -> tuple[str, list[str], list[str]]:
    """``line`` with bookworm's names for the packages it installs; (line, dropped, mapped)."""
    dropped: list[str] = []
    mapped: list[str] = []

    def fix(m: re.Match[str]) -> str:
        words = []
        for word in m.group(2).split():
            if word in APT_SUBSTITUTES:
                new = APT_SUBSTITUTES[word]
                if new is None:
                    dropped.append(word)
                    continue
                mapped.append(f"{word}->{new}")
                word = new
            words.append(word)
        return m.group(1) + " ".join(words) + (" " if m.group(2)[-1:].isspace() else "")

    out = re.sub(r"(apt-get install\s+)([^&;|]*)", fix, line)
    return out, dropped, mapped


def read_pro_recipe(instance_id: str, base: str, instance: str) -> ProRecipe:
    """Both Dockerfile texts as a stand-in recipe.

    Raises:
        ConfigError: naming the instance and the instruction farm does not know how to stand in for.
    """
    base_ins = _instructions(base)
    if not base_ins or not base_ins[0].startswith("FROM "):
        raise ConfigError(f"{instance_id}: its base Dockerfile does not start with FROM")
    image, python = _python_of(base, instance_id)
    env: list[str] = []
    dropped: list[str] = []
    mapped: list[str] = []
    after_clone: list[str] = []
    substituted: list[str] = []
    for ins in base_ins[1:]:
        if _CLONE.match(ins) or _CHECKOUT.match(ins):
            continue  # the repository comes from the mirror in the instance layer
        if _SUBMODULES.match(ins):
            after_clone.append(ins)
            continue
        host = next((h for h in UNREACHABLE if h in ins), None)
        if host is not None:
            env += _stand_in_for(ins, host, substituted)
            continue
        if "git clone" in ins or "http://" in ins or "https://" in ins:
            raise ConfigError(f"{instance_id}: its base Dockerfile downloads in {ins[:120]!r}, which farm's "
                              "SWE-bench Pro stand-in cannot serve yet")
        if "apt-get install" in ins:
            ins, d, m = _apt_line(ins)
            dropped += d
            mapped += m
        env.append(ins)
    inst: list[str] = []
    files: dict[str, bytes] = {}
    ins_list = _instructions(instance)
    if not ins_list or not ins_list[0].startswith("FROM "):
        raise ConfigError(f"{instance_id}: its instance Dockerfile does not start with FROM")
    for ins in ins_list[1:]:
        head, _, body = ins.partition("\n")
        m = _HEREDOC.match(head)
        if m:
            name = "files" + m.group(2)
            files[name] = body.encode()
            inst.append(f"COPY {name} {m.group(2)}")
            continue
        if "git clone" in ins or "git submodule" in ins:
            raise ConfigError(f"{instance_id}: its instance Dockerfile runs {ins[:120]!r}, which farm's SWE-bench "
                              "Pro stand-in cannot serve yet")
        inst.append(ins)
    return ProRecipe(instance_id, python, env, inst, files, tuple(dropped), tuple(mapped), after_clone,
                     tuple(substituted), image)


def _stand_in_for(ins: str, host: str, substituted: list[str]) -> list[str]:
    """The instructions that stand in for ``ins``, which downloads from ``host``."""
    extra = UNREACHABLE[host]
    if extra is None:
        substituted.append(f"{host} download dropped")
        return []
    kept = [p for p in _apt_words(ins) if p not in APT_SUBSTITUTES and p not in extra]
    what = "Debian's " + " ".join(extra) if extra else "not installed"
    substituted.append(f"{host}: {what}" + (f" (the line's other packages kept: {' '.join(kept)})" if kept else ""))
    pkgs = [*kept, *extra]
    if not pkgs:
        return []
    return [f"RUN apt-get update && apt-get install -y --no-install-recommends {' '.join(pkgs)} "
            "&& rm -rf /var/lib/apt/lists/*"]


def _apt_words(ins: str) -> list[str]:
    words: list[str] = []
    for m in re.finditer(r"apt-get install([^&;|]*)", ins):
        words += [w for w in m.group(1).split() if not w.startswith("-")]
    return words


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256(f"farm-swebench-pro v{FORMAT}\0".encode())
    for p in parts:
        h.update((p.encode() if isinstance(p, str) else p) + b"\0")
    return h.hexdigest()[:16]


def differences(recipe: ProRecipe, base_desc: str) -> str:
    parts = [f"farm stand-in for a SWE-bench Pro instance image, built from its own Dockerfiles: {base_desc}",
             "the repository is a one-commit clone of the base commit from a local mirror (no environment commit, "
             "no later history; grading makes the fix's test files from test_patch)",
             "build.sh runs unchanged (its pip resolves through pypi-timemachine as of the recipe's date; the two "
             "installs before it starts resolve as of this build)"]
    if recipe.dropped_apt:
        parts.append("apt packages not in Debian bookworm dropped: " + ", ".join(recipe.dropped_apt))
    if recipe.mapped_apt:
        parts.append("apt names mapped: " + ", ".join(recipe.mapped_apt))
    parts += list(recipe.substituted)
    if recipe.old_python:
        parts.append(f"build.sh's pypi-timemachine is {TIMEMACHINE} on Debian's Python 3.11 (the version Python "
                     f"{recipe.python} installs no longer works against PyPI)")
    return "; ".join(parts)


def env_layer(recipe: ProRecipe, repo: str, root: str, root_id: str, python: PythonPrefix | None) -> Layer:
    """The base Dockerfile on farm's python:X.Y: the stand-in of python:3.11-slim (``python`` None,
    ``root`` that image), or the Debian ``root`` with ``python`` copied to /usr/local."""
    cas = host_cas()
    head = [f"FROM {root}"]
    if python is not None:
        exe = f"/usr/local/bin/python{python.minor}"
        # what the official image has: python, python3, pip, pip3 on PATH; scripts the prefix carries
        # point at the interpreter where it now lives
        head += [
            "ENV LANG=C.UTF-8",
            *(["COPY host-ca/ /usr/local/share/ca-certificates/"] if cas else []),
            f"RUN apt-get update && apt-get install -y --no-install-recommends {' '.join(PYTHON_RUNTIME)} "
            "&& update-ca-certificates && rm -rf /var/lib/apt/lists/*",
            "COPY python/ /usr/local/",
            "RUN cd /usr/local/bin && for f in *; do [ -f \"$f\" ] && [ ! -L \"$f\" ] "
            f"&& head -c2 \"$f\" | grep -q '#!' && sed -i '1s|^#!.*python.*$|#!{exe}|' \"$f\"; done; "
            # pyenv's pip, pip3 and python3 may be links to the versioned names: replaced, not written through
            f"rm -f python python3 pip pip3 pip{python.minor} && "
            f"ln -s python{python.minor} python3 && ln -s python{python.minor} python && "
            f"printf '#!/bin/sh\\nexec {exe} -m pip \"$@\"\\n' > pip && chmod 755 pip && cp pip pip3 && "
            f"cp pip pip{python.minor} && {exe} -c 'import ssl, sqlite3, ctypes'"
            # where an Ubuntu recipe finds its python3.X (`ln -sf /usr/bin/python3.9 /usr/bin/python3`)
            + (f" && ln -sf {exe} /usr/bin/python{python.minor}" if python.minor != "3.11" else ""),
            f"ENV PYTHON_VERSION={python.version}",
        ]
    head += _CERT_ARGS
    if recipe.old_python:
        # the pypi-timemachine such a Python installs no longer works against PyPI (its file links
        # 404): one that does, on Debian's own 3.11, is found first on the PATH build.sh runs with
        head.append(
            "RUN apt-get update && apt-get install -y --no-install-recommends python3.11 python3.11-venv "
            f"&& rm -rf /var/lib/apt/lists/* && /usr/bin/python3.11 -m venv --copies {_TM_VENV} "
            f"&& {_TM_VENV}/bin/pip install -q pypi-timemachine=={TIMEMACHINE} && mkdir -p {_TM_BIN} "
            f"&& ln -s {_TM_VENV}/bin/pypi-timemachine {_TM_BIN}/pypi-timemachine")
    text = "\n".join([*head, *recipe.env_lines]) + "\n"
    key = _digest(text, root_id, python.version if python else "", *(k.encode() + v for k, v in sorted(cas.items())))
    name = repo.replace("/", "__").lower()
    files = {f"host-ca/{k}": v for k, v in cas.items()} if python is not None else {}
    return Layer(f"{TAG_PREFIX}/env.{name}.py{recipe.python}:{key}", text, files, key=key)


def instance_layer(recipe: ProRecipe, env: Layer, base_commit: str, tag: str, base_desc: str,
                   side: list[str] | None = None, side_notes: list[str] | None = None) -> Layer:
    """The instance Dockerfile on the environment, the repository at /app from the build context;
    ``side``: the lines that serve the other repositories it fetches (farm/sandbox/images/swebench_pro/side.py),
    run before the base's own submodule checkout, which needs the repository."""
    diff = "; ".join([differences(recipe, base_desc), *(side_notes or [])])
    text = "\n".join([
        f"FROM {env.tag}",
        *_CERT_ARGS,
        "COPY app /app",
        "WORKDIR /app",
        *(side or []),
        *recipe.after_clone,
        *(f"RUN PATH={_TM_BIN}:$PATH {ln[4:]}" if recipe.old_python and ln == "RUN /build.sh" else ln
          for ln in recipe.instance_lines),
        "LABEL io.farm.standin=true",
        f"LABEL io.farm.standin.differences={json.dumps(diff)}",
    ]) + "\n"
    key = _digest(text, env.key, base_commit, *(k.encode() + v for k, v in sorted(recipe.files.items())))
    return Layer(tag, text + f"LABEL {RECIPE_LABEL}={key}\n", dict(recipe.files), key=key)
