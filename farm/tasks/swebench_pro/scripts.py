"""The per-instance grading scripts of SWE-bench Pro, from a copy the user names (``benchmark.pro_scripts``).

They are not in the dataset rows: ``scaleapi/SWE-bench_Pro-os`` keeps ``run_scripts/<id>/run_script.sh``
and ``run_scripts/<id>/parser.py`` (and the image recipes under ``dockerfiles/``). ``DIR`` may be
a checkout of that repository, a bare clone or a snapshot's git directory (read at its ``HEAD``),
or a plain folder holding ``<id>/run_script.sh`` and ``<id>/parser.py``. Nothing is fetched: a
missing directory, instance or file is an error that names it.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from farm.errors import ConfigError

KEY = "benchmark.pro_scripts"
FILES = ("run_script.sh", "parser.py")


class ScriptsError(ConfigError):
    """The scripts directory lacks what an instance needs."""


def _git_dir(path: Path) -> Path | None:
    for cand in (path, path / "repo"):
        if (cand / "HEAD").is_file() and (cand / "objects").is_dir():
            return cand
    return None


@dataclass(frozen=True)
class ProScripts:
    root: Path
    git_dir: Path | None  # read with ``git show HEAD:<path>`` when set
    prefix: str  # "run_scripts/" in the official layout, "" in a plain folder

    @classmethod
    def at(cls, path: str | Path, key: str = KEY) -> ProScripts:
        """Raises: ConfigError naming ``key`` when ``path`` is not a scripts directory."""
        root = Path(path).expanduser()
        if not root.is_dir():
            raise ConfigError(f"invalid value {str(path)!r} for '{key}': not a directory (expected a copy of "
                              "scaleapi/SWE-bench_Pro-os, or a folder of <instance_id>/run_script.sh and parser.py)")
        root = root.resolve()
        if (root / "run_scripts").is_dir():
            return cls(root, None, "run_scripts/")
        git_dir = _git_dir(root)
        if git_dir is not None:
            if subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "-e", "HEAD:run_scripts"],
                              capture_output=True).returncode != 0:
                raise ConfigError(f"invalid value {str(path)!r} for '{key}': the git repository at {git_dir} has "
                                  "no run_scripts/ at HEAD (not a copy of scaleapi/SWE-bench_Pro-os)")
            return cls(root, git_dir, "run_scripts/")
        if not any(p.is_dir() and (p / "parser.py").is_file() for p in root.iterdir()):
            raise ConfigError(f"invalid value {str(path)!r} for '{key}': no run_scripts/ and no <instance_id>/"
                              "parser.py in it")
        return cls(root, None, "")

    def revision(self) -> str | None:
        """The commit the scripts are read at, when they come from git (recorded as provenance)."""
        git_dir = self.git_dir or _git_dir(self.root)
        if git_dir is None:
            return None
        res = subprocess.run(["git", f"--git-dir={git_dir}", "rev-parse", "HEAD"], capture_output=True, text=True)
        return res.stdout.strip() if res.returncode == 0 else None

    def _read(self, rel: str) -> str | None:
        if self.git_dir is not None:
            res = subprocess.run(["git", f"--git-dir={self.git_dir}", "show", f"HEAD:{rel}"], capture_output=True)
            return res.stdout.decode("utf-8", errors="replace") if res.returncode == 0 else None
        path = self.root / rel
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None

    def scripts(self, instance_id: str) -> dict[str, str]:
        """``run_script.sh`` and ``parser.py`` of the instance.

        Raises:
            ScriptsError: naming the instance and the file that is missing.
        """
        out = {}
        for name in FILES:
            text = self._read(f"{self.prefix}{instance_id}/{name}")
            if text is None:
                raise ScriptsError(f"{KEY}={self.root}: no {self.prefix}{instance_id}/{name} (the official grader "
                                   "runs that instance with it; use a copy of SWE-bench_Pro-os that has it)")
            out[name] = text
        return out

    def dockerfile(self, instance_id: str, kind: str) -> str | None:
        """``dockerfiles/<kind>/<id>/Dockerfile`` (kind: base_dockerfile | instance_dockerfile), if present."""
        return self._read(f"dockerfiles/{kind}/{instance_id}/Dockerfile")

    def instances(self) -> list[str]:
        """The instance ids with an instance Dockerfile (the public set), sorted."""
        if self.git_dir is not None:
            res = subprocess.run(["git", f"--git-dir={self.git_dir}", "ls-tree", "--name-only", "HEAD",
                                  "dockerfiles/instance_dockerfile/"], capture_output=True, text=True)
            return sorted(line.rsplit("/", 1)[-1] for line in res.stdout.split())
        folder = self.root / "dockerfiles" / "instance_dockerfile"
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []

    def env_lines(self, instance_id: str) -> list[str]:
        """The ``ENV`` lines of the instance's base and instance Dockerfiles as ``export`` lines,
        as the official entry script makes them (empty when the copy has no dockerfiles/)."""
        out = []
        for kind in ("base_dockerfile", "instance_dockerfile"):
            text = self.dockerfile(instance_id, kind) or ""
            for line in text.splitlines():
                line = line.strip()
                if re.match(r"^ENV\s", line):
                    out.append("export " + line[3:].strip())
        return out
