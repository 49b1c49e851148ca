"""Fixtures of the API-server emulator tests (test_emulator_*.py, test_exec_idle_emulator.py).

``cluster`` here is the emulator; the modules that run the in-process fakes instead
(test_kubernetes_backend.py, test_exec_survives.py, ...) define their own ``cluster``, which
overrides this one for them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kubernetes import EmulatorBackend


@pytest.fixture
def emulated(tmp_path: Path):
    """A started emulator with its backend; after the test, none of its handlers may have failed."""
    b = EmulatorBackend(tmp_path / "emulator")
    yield b
    b.close()
    assert b.emu.errors == [], b.emu.errors[0]


@pytest.fixture
def cluster(emulated: EmulatorBackend) -> EmulatorBackend:
    return emulated
