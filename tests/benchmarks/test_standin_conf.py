"""scripts/standin_images.py's podman configuration on a fresh machine (no cache yet)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from .standin import SCRIPT


def _script():
    spec = importlib.util.spec_from_file_location("standin_images_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    finally:
        del sys.modules[spec.name]
    return mod


def test_the_caches_own_file_is_written_when_named_before_it_exists(tmp_path: Path, monkeypatch) -> None:
    # the tests and the Makefile name <cache>/containers.conf up front; on a fresh machine it was
    # missing, podman import failed at once, and tar then blocked on its pipe for ever
    conf = tmp_path / "cache" / "containers.conf"
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))
    _script().ensure_containers_conf(tmp_path / "cache", lambda _msg: None)
    assert "[engine]" in conf.read_text() and 'runtime = "' in conf.read_text()


def test_another_missing_file_is_refused_by_name(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CONTAINERS_CONF", str(tmp_path / "elsewhere.conf"))
    with pytest.raises(SystemExit, match="elsewhere.conf does not exist"):
        _script().ensure_containers_conf(tmp_path / "cache", lambda _msg: None)


def test_a_chosen_file_that_exists_is_left_alone(tmp_path: Path, monkeypatch) -> None:
    mine = tmp_path / "mine.conf"
    mine.write_text("[engine]\n")
    monkeypatch.setenv("CONTAINERS_CONF", str(mine))
    _script().ensure_containers_conf(tmp_path / "cache", lambda _msg: None)
    assert mine.read_text() == "[engine]\n" and not (tmp_path / "cache").exists()
