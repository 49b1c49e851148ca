"""The ../shared helper skips or fails as documented; bundled fixtures stay verbatim copies."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shared import BUNDLED, REPO, shared_path, shared_root


def test_missing_shared_skips_with_one_line_naming_the_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FARM_SHARED_DIR", str(tmp_path / "nowhere"))
    monkeypatch.delenv("FARM_REQUIRE_SHARED", raising=False)
    with pytest.raises(pytest.skip.Exception) as exc:
        shared_path("fixtures", "harbor")
    msg = str(exc.value)
    assert "../shared/fixtures/harbor" in msg and str(tmp_path / "nowhere" / "fixtures" / "harbor") in msg
    assert "\n" not in msg


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_require_shared_turns_the_skip_into_a_failure(tmp_path: Path, monkeypatch, value: str) -> None:
    monkeypatch.setenv("FARM_SHARED_DIR", str(tmp_path))
    monkeypatch.setenv("FARM_REQUIRE_SHARED", value)
    with pytest.raises(pytest.fail.Exception, match=r"needs \.\./shared/reference/claims\.yaml.*FARM_REQUIRE_SHARED=1"):
        shared_path("reference", "claims.yaml")


def test_override_and_present_paths(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "claims.yaml").write_text("x: 1\n")
    monkeypatch.setenv("FARM_SHARED_DIR", str(tmp_path))
    monkeypatch.setenv("FARM_REQUIRE_SHARED", "0")  # "0" does not require it
    assert shared_path("reference", "claims.yaml") == tmp_path / "reference" / "claims.yaml"
    monkeypatch.setenv("FARM_SHARED_DIR", "relative/copy")
    assert shared_root() == REPO / "relative" / "copy"
    monkeypatch.delenv("FARM_SHARED_DIR")
    assert shared_root() == REPO.parent / "shared"
    with pytest.raises(pytest.skip.Exception):
        shared_path("no-such-entry-in-shared")


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.shared("fixtures/grading", "fixtures/leaf")
def test_bundled_fixtures_are_verbatim_copies_of_shared() -> None:
    fixtures = shared_path("fixtures")
    grading = _files(BUNDLED / "grading")
    assert grading and grading == _files(fixtures / "grading")
    # differential/ is farm's own recording of the vendor's runner (its README), not a copy
    leaf = {k: v for k, v in _files(BUNDLED / "leaf").items() if not k.startswith("differential/")}
    original = _files(fixtures / "leaf")
    # the digest lock ships with farm itself (farm/tasks/image_locks), byte-identical
    lock = original.pop("presets/image_locks/sweb-v-20260904.json")
    assert (REPO / "farm" / "tasks" / "image_locks" / "sweb-v-20260904.json").read_bytes() == lock
    assert leaf == original
