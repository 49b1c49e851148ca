"""What the pinned ``swebench`` package says about an instance: specs, scripts, test spec.

Nothing here re-types SWE-bench's recipe: the specs (``MAP_REPO_VERSION_TO_SPECS``), the
environment and repository set-up commands and the evaluation script all come from the package.
One thing is changed around it, never inside it: ``swebench`` 4.0.3 downloads each instance's
``requirements.txt`` / ``environment.yml`` at its environment commit from
raw.githubusercontent.com when it makes a test spec (for 298 of the 500 Verified instances),
although grading never uses them. :func:`served_from` answers those requests from the local
repository mirror instead, and refuses any other URL, so making a spec never reaches the network.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from farm.errors import ConfigError
from farm.tasks.swebench.mirror import RepoMirror

SWEBENCH_VERSION = "4.0.3"  # the version pinned in pyproject's `swebench` extra
ENV_NAME = "testbed"
REPO_DIR = "/testbed"
_RAW = re.compile(r"^https://raw\.githubusercontent\.com/([^/]+/[^/]+)/([0-9a-f]{7,40})/(.+)$")
_lock = threading.Lock()  # the patched module attribute is process-wide


class SwebenchMissingError(ConfigError):
    pass


def _package() -> Any:
    try:
        import swebench
        from swebench.harness.test_spec import python as py
    except ImportError as exc:
        raise SwebenchMissingError("SWE-bench rows need the `swebench` package: pip install 'farm[swebench]' "
                                   f"(swebench=={SWEBENCH_VERSION}); {exc}") from None
    if swebench.__version__ != SWEBENCH_VERSION:
        raise SwebenchMissingError(f"swebench {swebench.__version__} is installed; farm's SWE-bench path is "
                                   f"pinned to {SWEBENCH_VERSION} (pip install swebench=={SWEBENCH_VERSION})")
    return py


class _Response:
    def __init__(self, status: int, text: str = "") -> None:
        self.status_code = status
        self.text = text


class NetworkRefused(RuntimeError):
    """The swebench package asked for a URL farm does not serve from the mirror."""


class _MirrorRequests:
    """Stands in for the ``requests`` module inside ``swebench.harness.test_spec.python``."""

    def __init__(self, mirror: RepoMirror | None) -> None:
        self.mirror = mirror
        self.served: list[str] = []

    def get(self, url: str, headers: Mapping[str, str] | None = None, **_: Any) -> _Response:
        m = _RAW.match(url)
        if m is None:
            raise NetworkRefused(f"the swebench package asked for {url}: farm grades offline and serves only "
                                 "repository files, from benchmark.repos")
        repo, commit, path = m.group(1), m.group(2), m.group(3)
        if self.mirror is None:
            raise NetworkRefused(f"the swebench package needs {path} of {repo} at {commit} (its environment "
                                 "recipe): set benchmark.repos to a mirror holding that repository")
        data = self.mirror.show(repo, commit, path.replace("/./", "/"))
        self.served.append(url)
        return _Response(404) if data is None else _Response(200, data.decode("utf-8", errors="replace"))


@contextlib.contextmanager
def served_from(mirror: RepoMirror | None) -> Iterator[_MirrorRequests]:
    """Within the block, the swebench package's downloads are answered from ``mirror``."""
    py = _package()
    fake = _MirrorRequests(mirror)
    with _lock:
        saved = py.requests
        py.requests = fake
        # the package caches answers per (repo, commit): a failed lookup must not stick
        py.get_requirements_by_commit.cache_clear()
        py.get_environment_yml_by_commit.cache_clear()
        try:
            yield fake
        finally:
            py.requests = saved
            py.get_requirements_by_commit.cache_clear()
            py.get_environment_yml_by_commit.cache_clear()


def _listed(value: Any) -> list[str]:
    return list(json.loads(value)) if isinstance(value, str) else list(value or [])


def register(row: Mapping[str, Any]) -> None:
    """Make the package know a row's own spec (rows.py's ``spec``/``log_parser_of`` extension).

    Raises:
        ConfigError: the row would replace a spec or parser the package already has, or names a
            parser repository the package does not know.
    """
    if "spec" not in row:
        return
    _package()
    from swebench.harness.constants import MAP_REPO_TO_EXT, MAP_REPO_VERSION_TO_SPECS
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    repo, version, parser = row["repo"], str(row["version"]), row["log_parser_of"]
    known = MAP_REPO_VERSION_TO_SPECS.get(repo, {}).get(version)
    if known is not None and known != row["spec"]:
        raise ConfigError(f"instance {row['instance_id']}: field 'spec' would replace swebench's own spec for "
                          f"{repo} {version}; rows of the package's repositories use its specs")
    if parser not in MAP_REPO_TO_PARSER:
        raise ConfigError(f"instance {row['instance_id']}: invalid value {parser!r} for 'log_parser_of': "
                          "not a repository the swebench package has a log parser for")
    MAP_REPO_VERSION_TO_SPECS.setdefault(repo, {})[version] = dict(row["spec"])
    MAP_REPO_TO_PARSER.setdefault(repo, MAP_REPO_TO_PARSER[parser])
    MAP_REPO_TO_EXT.setdefault(repo, "py")


def specs_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """The package's specs for the row's repository and version.

    Raises:
        ConfigError: the package has no specs for that repository/version.
    """
    _package()
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

    register(row)
    repo, version = row["repo"], str(row["version"])
    try:
        return dict(MAP_REPO_VERSION_TO_SPECS[repo][version])
    except KeyError:
        raise ConfigError(f"instance {row['instance_id']}: swebench {SWEBENCH_VERSION} has no specs for "
                          f"repo={repo!r} version={version!r}") from None


def eval_script(row: Mapping[str, Any]) -> str:
    """The evaluation script the package makes for the instance (what its harness runs)."""
    _package()
    from swebench.harness.test_spec.create_scripts import make_eval_script_list

    lines = make_eval_script_list(dict(row), specs_of(row), ENV_NAME, REPO_DIR, row["base_commit"], row["test_patch"])
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *lines]) + "\n"


def test_spec(row: Mapping[str, Any], mirror: RepoMirror | None = None) -> Any:
    """The package's ``TestSpec`` (environment, repository and evaluation scripts, image keys).

    Raises:
        NetworkRefused: the spec needs a requirements file and ``mirror`` is None.
        MirrorError: the mirror lacks the repository or the environment commit.
    """
    register(row)
    from swebench.harness.test_spec.test_spec import make_test_spec

    with served_from(mirror):
        return make_test_spec(dict(row))


def grading_spec(row: Mapping[str, Any]) -> Any:
    """A ``TestSpec`` with what the package's log parsers and report read (repo, version, tests),
    made without the environment recipe: grading never needs the requirements files."""
    register(row)
    from swebench.harness.constants import MAP_REPO_TO_EXT
    from swebench.harness.test_spec.test_spec import TestSpec

    return TestSpec(instance_id=row["instance_id"], repo=row["repo"], version=str(row["version"]),
                    repo_script_list=[], eval_script_list=[], env_script_list=[], arch="x86_64",
                    FAIL_TO_PASS=_listed(row.get("FAIL_TO_PASS")), PASS_TO_PASS=_listed(row.get("PASS_TO_PASS")),
                    language=MAP_REPO_TO_EXT[row["repo"]], docker_specs={}, namespace=None)


def instance_image(row: Mapping[str, Any]) -> str:
    """The published instance image the row's Harbor task names (``swebench/sweb.eval.x86_64.<id>``)."""
    return f"swebench/sweb.eval.x86_64.{row['instance_id'].lower().replace('__', '_1776_')}:latest"
