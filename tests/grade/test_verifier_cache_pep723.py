"""The verifier cache reads PEP 723 script blocks (farm/grade/script_metadata.py): the scripts a
verifier runs with ``uv run`` get their dependencies staged like test.sh's own pins. No network:
manifests are written by hand, and pip resolves from a local directory of wheels."""

from __future__ import annotations

import base64
import hashlib
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from farm.grade import verifier_cache as vc
from farm.grade.script_metadata import JOINT, admitted_pythons, script_blocks
from tests.shared import shared_path

DJANGO = "fixtures/harbor/swebench-verified/django__django-13401"
PARSER_DEPS = ("swebench==4.0.3", "datasets==2.16.1", "fastcore<1.11")

PARSER_PY = '''#!/usr/bin/env python3
# /// script
# requires-python = ">=3.11"
# dependencies = [
#   "unidiff==0.7.5",
#   "rich >= 13",  # a comment in the TOML
# ]
# ///
import subprocess
subprocess.run("pip install notapin==9.9", shell=True)  # a string in a script is not a pin
'''


def _task(root: Path, name: str, files: dict[str, str]) -> Path:
    tests = root / name / "tests"
    tests.mkdir(parents=True)
    for fname, text in files.items():
        (tests / fname).write_text(text)
    return tests


def test_the_django_fixture_yields_the_parsers_pep723_dependencies_each_and_together() -> None:
    text = (shared_path(DJANGO) / "tests" / "test.sh").read_text()
    reqs = vc.pins_in(text)
    assert set(PARSER_DEPS) <= reqs
    assert JOINT.join(PARSER_DEPS) in reqs  # uv resolves them together: so does the builder
    (block,) = script_blocks(text, "test.sh")
    assert (block.requires_python, block.dependencies) == (">=3.11", PARSER_DEPS)


def test_scan_pins_reads_the_fixture_and_applies_exclude_to_block_dependencies(tmp_path: Path) -> None:
    root = tmp_path / "harbor"
    shutil.copytree(shared_path(DJANGO), root / "django__django-13401")
    every = vc.scan_pins([root], exclude=())
    assert set(PARSER_DEPS) | {JOINT.join(PARSER_DEPS)} <= set(every)
    default = vc.scan_pins([root])  # datasets is in DEFAULT_EXCLUDE: it and the joint entry go
    assert "datasets==2.16.1" not in default and JOINT.join(PARSER_DEPS) not in default
    assert {"swebench==4.0.3", "fastcore<1.11"} <= set(default)


def test_a_block_in_a_tests_python_file_is_read_and_its_code_is_not_scanned_for_pins(tmp_path: Path) -> None:
    _task(tmp_path, "t1", {"test.sh": "uv run /tests/parser.py\n", "parser.py": PARSER_PY})
    pins = vc.scan_pins([tmp_path])
    assert pins == ["rich>=13", "unidiff==0.7.5", f"unidiff==0.7.5{JOINT}rich>=13"]
    (block,) = vc.scan_scripts([tmp_path])
    assert block.source == str(tmp_path / "t1" / "tests" / "parser.py") and block.line == 2


@pytest.mark.parametrize(("body", "why"), [
    ('# /// script\n# dependencies = ["a==1"\n# ///\n', r"parser\.py:1: the `# /// script` block is not valid TOML"),
    ('# /// script\n# dependencies = ["a==1"]\nimport sys\n', r"parser\.py:1: .*no closing `# ///` line"),
    ('# /// script\n# dependencies = "a==1"\n# ///\n', r"parser\.py:1: `dependencies` must be a list of strings"),
    ('# /// script\n# dependencies = ["a=>1"]\n# ///\n', r"parser\.py:1: dependency 'a=>1' is not a requirement"),
    ('# /// script\n# requires-python = "3.11+"\n# ///\n', r"parser\.py:1: requires-python '3\.11\+' is not"),
    ('# /// script\n# ///\n\n# /// script\n# ///\n', r"parser\.py: 2 `# /// script` blocks \(lines 1, 4\)"),
])
def test_a_malformed_block_is_an_error_naming_the_file_and_line(tmp_path: Path, body: str, why: str) -> None:
    tests = _task(tmp_path, "bad", {"test.sh": "uv run parser.py\n", "parser.py": body})
    with pytest.raises(vc.CacheError, match=why) as err:
        vc.scan_pins([tmp_path])
    assert str(tests / "parser.py") in str(err.value)
    with pytest.raises(vc.CacheError, match=why):  # staging refuses it too (infra_error:verifier_cache)
        vc.wheels_for(_manifest({"pytest==8.4.1": ["p.whl"]}), "bash x\n", tests)


def test_an_unterminated_block_in_a_test_sh_heredoc_names_test_sh(tmp_path: Path) -> None:
    _task(tmp_path, "t", {"test.sh": "cat > p.py <<EOF\n# /// script\n# dependencies = []\nEOF\nuv run p.py\n"})
    with pytest.raises(vc.CacheError, match=r"t/tests/test\.sh:2: .*no closing"):
        vc.scan_pins([tmp_path])


def test_test_sh_may_write_several_scripts_and_blocks_of_other_types_are_skipped() -> None:
    sh = ("cat > a.py <<-EOF\n\t# /// script\n\t# dependencies = ['a==1']\n\t# ///\n\tEOF\n"
          "cat > b.py <<'EOF'\n# /// pyproject\n# not = toml = at all\n# ///\nimport sys\n"
          "# /// script\n#\n# dependencies = ['b<2']\n# ///\nEOF\nuvx -w pytest==8.4.1 pytest\n")
    assert vc.pins_in(sh) == {"a==1", "b<2", "pytest==8.4.1"}


def _manifest(closure: dict[str, list[str]]) -> vc.Manifest:
    data = {"format": vc.FORMAT, "stage_dir": vc.STAGE_DIR, "closure": closure,
            "wheels": [{"file": f} for f in sorted({f for fs in closure.values() for f in fs})]}
    return vc.Manifest(Path("/nonexistent"), data)


def test_wheels_for_sends_the_wheels_of_a_blocks_dependencies_and_of_their_joint_resolution(tmp_path: Path) -> None:
    tool = {req: [f"{req.split('==')[0]}-tool.whl"] for req in vc.TOOL_REQUIREMENTS}
    closure = {**tool, "swebench==4.0.3": ["swebench-4.0.3-py3-none-any.whl", "ghapi-1.0.13-py3-none-any.whl"],
               "datasets==2.16.1": ["datasets-2.16.1-py3-none-any.whl"],
               "fastcore<1.11": ["fastcore-1.10.3-py3-none-any.whl"],
               JOINT.join(PARSER_DEPS): ["ghapi-1.0.11-py3-none-any.whl", "fastcore-1.10.3-py3-none-any.whl"],
               "unidiff==0.7.5": ["unidiff-0.7.5-py2.py3-none-any.whl"],
               "other==1.0": ["other-1.0-py3-none-any.whl"]}
    man = _manifest(closure)
    tools = {f for req in vc.TOOL_REQUIREMENTS for f in closure[req]}
    sent = vc.wheels_for(man, (shared_path(DJANGO) / "tests" / "test.sh").read_text())
    assert set(sent) == tools | {"swebench-4.0.3-py3-none-any.whl", "ghapi-1.0.13-py3-none-any.whl",
                                 "ghapi-1.0.11-py3-none-any.whl", "datasets-2.16.1-py3-none-any.whl",
                                 "fastcore-1.10.3-py3-none-any.whl"}
    tests = _task(tmp_path, "t", {"test.sh": "uv run /tests/parser.py\n", "parser.py": PARSER_PY})
    assert set(vc.wheels_for(man, "uv run /tests/parser.py\n", tests)) == tools | {"unidiff-0.7.5-py2.py3-none-any.whl"}
    assert set(vc.wheels_for(man, "uv run /tests/parser.py\n")) == tools  # without the tests dir: not read


def test_requires_python_is_checked_against_the_caches_pythons() -> None:
    pythons = ("3.11", "3.12", "3.13")
    assert admitted_pythons(">=3.11", pythons) == list(pythons)
    assert admitted_pythons(None, pythons) == list(pythons)
    assert admitted_pythons(">3.12", pythons) == ["3.12", "3.13"]  # 3.12.1 is > 3.12
    assert admitted_pythons("<3.11,!=3.12.*", pythons) == []
    assert admitted_pythons(">=3.14", pythons) == []


def test_the_builder_records_requires_python_and_says_when_it_admits_none_of_the_pythons(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name, rp in (("a", ">=3.14"), ("b", ">=3.14"), ("c", ">=3.11")):
        _task(tmp_path / "bench", name, {"test.sh": "uv run /tests/p.py\n",
                                         "p.py": f'# /// script\n# requires-python = "{rp}"\n'
                                                 '# dependencies = ["x==1", "datasets==2.16.1"]\n# ///\n'})
    seen = {}

    def fake_build(out: Path, reqs: list[str], **kw: object) -> vc.Manifest:  # no PyPI in tests
        seen.update(reqs=reqs, **kw)
        (out / vc.MANIFEST).parent.mkdir(parents=True, exist_ok=True)
        (out / vc.MANIFEST).write_text("{}")
        data = {"uv": {"version": vc.UV_VERSION}, "python": {"version": "3.13.5-2"}, "wheels": [], "bytes": 0,
                "missing": [], "scripts": kw["scripts"]}
        return vc.Manifest(out, data)

    monkeypatch.setattr(vc, "build", fake_build)
    assert vc.main([str(tmp_path / "out"), "--tasks", str(tmp_path / "bench"), "--pythons", "3.12,3.13"]) == 0
    records = {r["requires_python"]: r for r in seen["scripts"]}
    assert records[">=3.14"]["pythons"] == [] and records[">=3.14"]["scripts"] == 2
    assert records[">=3.11"]["pythons"] == ["3.12", "3.13"]
    assert all(r["excluded"] == ["datasets==2.16.1"] for r in records.values())
    assert "x==1" in seen["reqs"] and "datasets==2.16.1" not in seen["reqs"]
    out = capsys.readouterr().out
    a = str(tmp_path / "bench" / "a" / "tests" / "p.py")
    assert (f"PEP 723 script {a}:1 (and 1 more): requires-python '>=3.14' admits none of the cache's pythons "
            "3.12, 3.13 (--pythons)") in out
    assert "datasets==2.16.1 left out by --exclude" in out
    # the spec changes with the blocks only when there are some: older caches are not rebuilt
    assert vc.spec_of(["a==1"], ("3.13",), "0.9.5", "trixie", []) == vc.spec_of(["a==1"], ("3.13",), "0.9.5", "trixie")
    assert vc.spec_of(["a==1"], ("3.13",), "0.9.5", "trixie", seen["scripts"]) != vc.spec_of(
        ["a==1"], ("3.13",), "0.9.5", "trixie")


def test_a_malformed_block_makes_the_builder_fail_with_the_file_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _task(tmp_path / "bench", "bad", {"test.sh": "uv run p.py\n", "p.py": "# /// script\n# x = [\n# ///\n"})
    assert vc.main([str(tmp_path / "out"), "--tasks", str(tmp_path / "bench")]) == 1
    assert "bad/tests/p.py:1: the `# /// script` block is not valid TOML" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _wheel(index: Path, name: str, version: str, requires: list[str]) -> None:
    """A real (tiny, pure) wheel in a local find-links directory."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "",
             f"{dist}/METADATA": "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
                 name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)),
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: farm-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    def digest(t: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()

    record = "".join(f"{p},sha256={digest(t)},{len(t.encode())}\n" for p, t in files.items()) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(index / f"{name}-{version}-py3-none-any.whl", "w") as zf:
        for p, t in {**files, f"{dist}/RECORD": record}.items():
            zf.writestr(p, t)


@pytest.mark.integration  # pip runs as a process (from a local directory of wheels: no network)
def test_a_blocks_joint_entry_resolves_a_version_no_dependency_picks_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # swebench -> ghapi -> fastcore in miniature: the newest app needs lib>=2, the block says lib<2
    index = tmp_path / "index"
    index.mkdir()
    _wheel(index, "farmtop", "1.0", ["farmapp"])
    _wheel(index, "farmapp", "1.0", ["farmlib<2"])
    _wheel(index, "farmapp", "2.0", ["farmlib>=2"])
    _wheel(index, "farmlib", "1.0", [])
    _wheel(index, "farmlib", "2.0", [])
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    pip = [sys.executable, "-m", "pip"]
    flags = ["--python-version", "3.13", "--implementation", "cp", "--abi", "cp313",
             "--platform", "manylinux_2_17_x86_64"]
    block = script_blocks('# /// script\n# dependencies = ["farmtop==1.0", "farmlib<2"]\n# ///\n', "p.py")[0]
    got = {}
    for req in sorted(block.requirements()):
        dest = tmp_path / f"got-{len(got)}"
        ok, _ = vc.download_closure(pip, dest, req, flags, tmp_path / "built")
        assert ok, req
        got[req] = sorted(p.name for p in dest.iterdir())
    alone = set(got["farmtop==1.0"]) | set(got["farmlib<2"])
    assert "farmapp-1.0-py3-none-any.whl" not in alone
    assert got[f"farmtop==1.0{JOINT}farmlib<2"] == ["farmapp-1.0-py3-none-any.whl", "farmlib-1.0-py3-none-any.whl",
                                                     "farmtop-1.0-py3-none-any.whl"]
