"""Fixtures shared by the image tests of this folder (test_images_podman.py, test_images_check.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.podman import podman


@pytest.fixture
def tags() -> Any:
    """Every tag a test makes; removed after it."""
    made: list[str] = []
    yield made
    for tag in made:
        podman("rmi", "-f", tag)
