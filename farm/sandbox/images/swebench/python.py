"""The CPython an instance environment is made from, when SWE-bench's spec names a version.

SWE-bench's images get Python from conda; farm has no conda. It copies a CPython prefix the user
provides or the machine has (``benchmark.pythons``: a directory of prefixes named by version,
pyenv's ``versions/`` layout, default ``~/.pyenv/versions``) into the environment image, trimmed
to the interpreter, its standard library and pip/setuptools/wheel, with the interpreter's library
search path made relative so that the copy runs from any prefix. Which prefix was used is
recorded on the image (label ``io.farm.swebench.python``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from farm.errors import ConfigError

DEFAULT_PYTHONS = "~/.pyenv/versions"
# the python3 package of the base image's Debian release (bookworm): used when no prefix is given
DEBIAN_PYTHON = "3.11"
# what a conda environment starts with besides the standard library
_KEEP_SITE = ("pip", "setuptools", "wheel", "pkg_resources", "_distutils_hack", "distutils-precedence.pth")


@dataclass(frozen=True)
class PythonPrefix:
    version: str  # X.Y.Z, or X.Y for Debian's
    path: Path | None  # None: Debian's own python3.X in the base image, as a venv with copied binaries

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


def find_python(minor: str, pythons: str | None) -> PythonPrefix:
    """The newest prefix for ``minor`` (``3.9``) under ``pythons``; for the base image's Debian
    python (3.11) with no prefix given, Debian's own.

    Raises:
        ConfigError: naming the version, the directory and what it has.
    """
    root = Path(pythons or DEFAULT_PYTHONS).expanduser()
    have = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
    found = [n for n in have if re.fullmatch(rf"{re.escape(minor)}(\.\d+)?", n)
             and (root / n / "bin" / f"python{minor}").exists()]
    if not found and minor == DEBIAN_PYTHON:
        return PythonPrefix(minor, None)
    if not found:
        raise ConfigError(f"SWE-bench needs CPython {minor} and benchmark.pythons={str(root)!r} has none "
                          f"(it has {have or 'nothing'}): put a CPython {minor} prefix there as {minor}.N "
                          "(e.g. `pyenv install`), or point benchmark.pythons at a directory that has one")
    best = max(found, key=lambda n: [int(x) for x in n.split(".")])
    out = subprocess.run([str(root / best / "bin" / f"python{minor}"), "-c",
                          "import sys; print('%d.%d.%d' % sys.version_info[:3])"], capture_output=True, text=True)
    version = out.stdout.strip() if out.returncode == 0 else best
    return PythonPrefix(version, (root / best).resolve())


def _ignore(minor: str):
    site = f"lib/python{minor}/site-packages"

    def ignore(directory: str, names: list[str]) -> set[str]:
        rel = os.path.relpath(directory, "/")
        skip = {n for n in names if n == "__pycache__"}
        if rel.endswith(f"lib/python{minor}"):
            skip |= {n for n in names if n in ("test", "idlelib", "turtledemo")}
        if rel.endswith(site):
            skip |= {n for n in names if not n.startswith(_KEEP_SITE)}
        return skip
    return ignore


def stage_python(prefix: PythonPrefix, dest: Path) -> None:
    """Copy ``prefix`` to ``dest`` (a build context folder), relocatable.

    Raises:
        ConfigError: patchelf is missing and the interpreter needs it.
    """
    assert prefix.path is not None, "Debian's python is not staged"
    shutil.copytree(prefix.path, dest, symlinks=True, ignore=_ignore(prefix.minor))
    for exe in (dest / "bin").glob("python*"):
        if exe.is_symlink() or not exe.is_file() or exe.read_bytes()[:4] != b"\x7fELF":
            continue
        if shutil.which("patchelf") is None:
            raise ConfigError("staging a CPython for SWE-bench needs patchelf (apt-get install patchelf)")
        subprocess.run(["patchelf", "--set-rpath", "$ORIGIN/../lib", str(exe)], check=True, capture_output=True)
