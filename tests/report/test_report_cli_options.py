"""`farm report` applies its own report.* overrides and --claims-dir over what the run stored."""

from __future__ import annotations

import shutil
from pathlib import Path

from farm.cli import main
from farm.config import conf_dir
from farm.store import ResultStore
from farm.store.schema import TRIALS_SCHEMA, to_table

from .synth import meta, plan_table, trial


def _store(tmp_path: Path) -> str:
    uri = str(tmp_path / "store")
    store = ResultStore.open(uri)
    store.write_run_meta("r", meta("r", report={"bootstrap": 300, "seed": 0}))
    store.write_plan("r", plan_table("r", "b", ["t1", "t2"], [0], ["base"], "m").to_pylist())
    store.write_rows("trials", "r", to_table([trial("r", "b", "t1", 0, "resolved"),
                                              trial("r", "b", "t2", 0, "unresolved")], TRIALS_SCHEMA))
    return uri


def test_report_overrides_win_over_the_stored_report_settings(tmp_path: Path) -> None:
    uri = _store(tmp_path)
    assert main(["report", "r", "--store", uri, "--out", str(tmp_path / "stored")]) == 0
    assert "B=300, seed=0" in (tmp_path / "stored" / "report.md").read_text()
    assert main(["report", "r", "--store", uri, "--out", str(tmp_path / "mine"), "report.bootstrap=50",
                 "report.seed=7"]) == 0
    assert "B=50, seed=7" in (tmp_path / "mine" / "report.md").read_text()


def test_claims_dir_flag_is_accepted_and_used(tmp_path: Path, capsys) -> None:
    uri = _store(tmp_path)
    claims = tmp_path / "claims"
    shutil.copytree(conf_dir() / "claims", claims)
    assert main(["report", "r", "--store", uri, "--out", str(tmp_path / "a"), "--claims-dir", str(claims)]) == 0
    empty = tmp_path / "not-a-dir"
    assert main(["report", "r", "--store", uri, "--out", str(tmp_path / "b"), "--claims-dir", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "report.claims_dir" in err and "not-a-dir" in err


def test_a_stray_option_is_still_an_error_naming_it(tmp_path: Path, capsys) -> None:
    import pytest

    with pytest.raises(SystemExit) as exc:
        main(["report", "r", "--store", _store(tmp_path), "--bogus"])
    assert exc.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err
