"""The pod's system-change listing (farm/sandbox/relayed/ctime_scan.py), run for real by a shell
on a directory tree standing in for a pod's system roots: what it lists after the start, and as
which kind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from farm.sandbox.relayed import ctime_scan


def _sh(command: str) -> str:
    return subprocess.run(["bash", "-c", command], check=True, capture_output=True, text=True).stdout


def test_what_changed_after_the_start_is_listed_and_a_new_bin_name_is_added(tmp_path: Path) -> None:
    usr, bin_dir = tmp_path / "usr", tmp_path / "usr" / "bin"
    site = usr / "lib" / "python3" / "site-packages"
    site.mkdir(parents=True)
    bin_dir.mkdir()
    for name in ("ls", "python3", "untouched"):
        (bin_dir / name).write_text("#!/bin/sh\n")
    (site / "pkg.py").write_text("x = 1\n")
    (tmp_path / "linked").symlink_to(usr)  # like /lib -> usr/lib: never walked twice
    root_conftest = tmp_path / "conftest.py"

    base = json.loads(_sh(ctime_scan.baseline_command(sys.executable, bins=[str(bin_dir)])))
    assert base["bins"] == {str(bin_dir): ["ls", "python3", "untouched"]}

    (bin_dir / "python3").write_text("#!/bin/sh\nexit 0\n")  # a trojan over the real one
    (bin_dir / "uvx").write_text("#!/bin/sh\n")  # a name the start did not have
    (site / "evil.pth").write_text("import os\n")
    os.chmod(site / "pkg.py", 0o600)  # a metadata change moves ctime too
    root_conftest.write_text("x = 1\n")

    out = _sh(ctime_scan.changed_command(sys.executable, base["t"], roots=[str(usr), str(tmp_path / "linked")],
                                         files=[str(root_conftest), str(tmp_path / "absent.ini")]))
    changes = dict((p, k) for k, p in ctime_scan.classify(json.loads(out), base["bins"]))
    assert changes == {
        str(root_conftest): "C",
        str(bin_dir): "C",  # the directory that gained a name
        str(bin_dir / "python3"): "C",
        str(bin_dir / "uvx"): "A",
        str(site): "C",
        str(site / "evil.pth"): "C",
        str(site / "pkg.py"): "C",
    }, changes


def test_nothing_is_listed_when_nothing_changed(tmp_path: Path) -> None:
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "sh").write_text("")
    base = json.loads(_sh(ctime_scan.baseline_command(sys.executable, bins=[str(tmp_path / "usr" / "bin")])))
    (tmp_path / "usr" / "bin" / "sh").read_text()  # reading moves no ctime
    out = _sh(ctime_scan.changed_command(sys.executable, base["t"], roots=[str(tmp_path / "usr")], files=[]))
    assert json.loads(out) == []
