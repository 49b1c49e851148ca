"""Real patches' edge cases through the harness's apply chain (farm/agent/predictions.py
``apply_command``: ``git apply -v``, then ``--reject``, then ``patch --fuzz=5``), each on a
repository the test makes. Every patch travels as a prediction does: text in a JSON predictions
file, read back by ``load_predictions``, written as ``Prediction.patch_bytes``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from farm.agent import predictions as pr

pytestmark = pytest.mark.tools("git", "patch")

GIT = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-c", "core.autocrlf=false"]


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run([*GIT, "-C", str(repo), *args], check=True, capture_output=True).stdout


def _repo(tmp_path: Path, files: dict[str, bytes]) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    return repo


def _diff_of(repo: Path, change: dict[str, bytes | None], *extra: str) -> bytes:
    """The patch of ``change`` (None deletes) against HEAD, as git writes it; the work tree is
    put back at HEAD afterwards."""
    for name, data in change.items():
        if data is None:
            (repo / name).unlink()
        else:
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_bytes(data)
    _git(repo, "add", "-A")
    patch = _git(repo, "diff", "--cached", "--binary", *extra)
    _git(repo, "reset", "-q", "--hard", "HEAD")
    _git(repo, "clean", "-qfd")
    return patch


def _apply(tmp_path: Path, repo: Path, patch: bytes) -> tuple[str | None, str]:
    """Send ``patch`` through a predictions file and the apply chain; (command that applied it or
    None, the chain's output)."""
    text = patch.decode("utf-8", errors="surrogateescape")
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": "i", "model_name_or_path": "m", "model_patch": text}) + "\n")
    staged = tmp_path / "patch.diff"
    staged.write_bytes(pr.load_predictions(preds).by_id["i"].patch_bytes())
    result = tmp_path / "result"
    res = subprocess.run(["bash", "-c", pr.apply_command(str(staged), str(result))], cwd=repo,
                         capture_output=True, text=True, errors="replace")
    applied = result / "applied"
    used = applied.read_text().strip() if applied.exists() else None
    assert (res.returncode == 0) == (used is not None), res.stdout
    return used, res.stdout


FIRST = "git apply --verbose"


def test_non_utf8_bytes_apply_byte_for_byte(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"latin1.txt": b"caf\xe9\nna\xefve\n"})
    patch = _diff_of(repo, {"latin1.txt": b"caf\xe9 cr\xe8me\nna\xefve\n"})
    assert b"\xe9 cr\xe8me" in patch  # not UTF-8: it rides the JSON file as surrogate escapes
    used, out = _apply(tmp_path, repo, patch)
    assert used == FIRST, out
    assert (repo / "latin1.txt").read_bytes() == b"caf\xe9 cr\xe8me\nna\xefve\n"


def test_a_git_binary_patch(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"img.bin": bytes(range(256)) * 4})
    new = bytes(reversed(range(256))) * 8 + b"\x00tail"
    patch = _diff_of(repo, {"img.bin": new, "new.bin": b"\x00\x01\x02"})
    assert b"GIT binary patch" in patch
    used, out = _apply(tmp_path, repo, patch)
    assert used == FIRST, out
    assert (repo / "img.bin").read_bytes() == new and (repo / "new.bin").read_bytes() == b"\x00\x01\x02"


def test_crlf_lines_stay_crlf(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"win.txt": b"one\r\ntwo\r\nthree\r\n"})
    patch = _diff_of(repo, {"win.txt": b"one\r\nTWO\r\nthree\r\n"})
    assert b"+TWO\r\n" in patch
    used, out = _apply(tmp_path, repo, patch)
    assert used == FIRST, out
    assert (repo / "win.txt").read_bytes() == b"one\r\nTWO\r\nthree\r\n"


def test_new_deleted_and_renamed_files(tmp_path: Path) -> None:
    body = b"".join(b"line %d\n" % i for i in range(40))
    repo = _repo(tmp_path, {"old/name.py": body, "gone.py": b"x = 1\n", "keep.py": b"k\n"})
    patch = _diff_of(repo, {"old/name.py": None, "new/name.py": body + b"line 40\n", "gone.py": None,
                            "added.py": b"print('hi')\n"}, "-M")
    assert b"rename from old/name.py" in patch and b"deleted file mode" in patch and b"new file mode" in patch
    used, out = _apply(tmp_path, repo, patch)
    assert used == FIRST, out
    assert not (repo / "old/name.py").exists() and not (repo / "gone.py").exists()
    assert (repo / "new/name.py").read_bytes() == body + b"line 40\n"
    assert (repo / "added.py").read_bytes() == b"print('hi')\n"


def test_test_files_the_model_edited_are_replaced_by_the_test_patch(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"src/calc.py": b"def add(a, b):\n    return a - b\n",
                            "tests/test_calc.py": b"def test_add():\n    pass\n"})
    base = _git(repo, "rev-parse", "HEAD").decode().strip()
    test_patch = _diff_of(repo, {"tests/test_calc.py": b"from src.calc import add\n\n\ndef test_add():\n"
                                                        b"    assert add(1, 2) == 3\n"})
    model = _diff_of(repo, {"src/calc.py": b"def add(a, b):\n    return a + b\n",
                            "tests/test_calc.py": b"def test_add():\n    assert True  # the model's weaker test\n"})
    used, out = _apply(tmp_path, repo, model)
    assert used == FIRST, out
    # what SWE-bench's eval script does next: the test files back at the base, then the test patch
    _git(repo, "checkout", base, "--", "tests/test_calc.py")
    subprocess.run(["git", "-C", str(repo), "apply", "-v", "-"], input=test_patch, check=True, capture_output=True)
    assert b"assert add(1, 2) == 3" in (repo / "tests/test_calc.py").read_bytes()
    assert b"weaker" not in (repo / "tests/test_calc.py").read_bytes()
    assert (repo / "src/calc.py").read_bytes().endswith(b"return a + b\n")  # the model's fix stays


def test_a_patch_over_one_megabyte(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"README": b"r\n"})
    big = b"".join(b"row %07d of generated data, long enough to add up\n" % i for i in range(22000))
    patch = _diff_of(repo, {"data/big.txt": big})
    assert len(patch) > 1 << 20
    used, out = _apply(tmp_path, repo, patch)
    assert used == FIRST, out
    assert (repo / "data/big.txt").read_bytes() == big


def test_no_newline_at_end_of_file(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"a.txt": b"one\ntwo"})
    patch = _diff_of(repo, {"a.txt": b"one\nTWO"})
    assert b"\\ No newline at end of file" in patch
    used, out = _apply(tmp_path, repo, patch)
    assert used == FIRST, out
    assert (repo / "a.txt").read_bytes() == b"one\nTWO"


def test_a_patch_that_applies_only_with_fuzz(tmp_path: Path) -> None:
    lines = [b"line %d\n" % i for i in range(1, 21)]
    repo = _repo(tmp_path, {"f.txt": b"".join(lines)})
    # the model's patch was written against a file whose context differs by one line
    drifted = lines.copy()
    drifted[7] = b"line 8 (as the model remembered it)\n"
    (repo / "f.txt").write_bytes(b"".join(drifted))
    _git(repo, "commit", "-qam", "drifted")
    changed = drifted.copy()
    changed[9] = b"line 10, fixed\n"
    patch = _diff_of(repo, {"f.txt": b"".join(changed)})
    _git(repo, "reset", "-q", "--hard", "HEAD~1")
    used, out = _apply(tmp_path, repo, patch)
    assert used == "patch --batch --fuzz=5 -p1 -i", out
    assert "Failed to apply patch to container: git apply --verbose --reject" in out  # tried in the harness's order
    result = (repo / "f.txt").read_bytes().splitlines(keepends=True)
    assert result[9] == b"line 10, fixed\n" and result[7] == b"line 8\n"


def test_a_patch_that_applies_nowhere_is_not_applied(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"a.txt": b"a\n"})
    used, out = _apply(tmp_path, repo, b"--- a/missing.py\n+++ b/missing.py\n@@ -1 +1 @@\n-x\n+y\n")
    assert used is None
    assert out.rstrip().endswith(">>>>> Patch Apply Failed")
    assert (repo / "a.txt").read_bytes() == b"a\n"
