"""`farm leaf import PATH` (issue 13 item 3): the vendor's prompt and tool schemas read from a
user's copy of its package, without running it, into local files with their hashes; every row
records the hashes and whose words they are; the report header says so; a reproduction with
farm's own wording warns once.

The package here is synthetic: the vendor's layout with made-up text (farm never ships the
vendor's wording)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from farm.agent.leaf_import import warn_unless_vendor_prompt
from farm.agent.tools import DEFAULT_TOOLS, prompt_identity, prompt_sha256, tools_sha256
from farm.cli import main
from farm.config import load_config
from farm.config.arms import arms_of
from farm.report.data import load_run
from farm.report.render import build_report
from farm.run.driver import run_experiment
from farm.store import ResultStore

PROMPT = "You are a made-up agent for a test.\nDo made-up things carefully."
TOOLS = [{"type": "function",
          "function": {**t["function"], "description": f"Made-up words for {t['function']['name']}."}}
         for t in DEFAULT_TOOLS]


def vendor_package(root: Path, layout: str = "frognano/harness/leaf/tools.py") -> Path:
    """A checkout with the vendor's layout; its module would leave a marker file if it ran."""
    module = root / layout
    module.parent.mkdir(parents=True)
    marker = root / "the-module-ran"
    module.write_text(
        '"""Synthetic stand-in."""\n\nfrom __future__ import annotations\n\n'
        f"SYSTEM_PROMPT = (\n    {PROMPT.splitlines(True)[0]!r}\n    {PROMPT.splitlines(True)[1]!r}\n)\n\n"
        f"OPENAI_TOOLS = {TOOLS!r}\n\n"
        f"open({str(marker)!r}, 'w').close()\n"
    )
    return root


def test_import_writes_the_prompt_and_tools_with_their_hashes_without_running_the_module(tmp_path, capsys):
    checkout = vendor_package(tmp_path / "FrogNano")
    out = tmp_path / "imported"
    assert main(["leaf", "import", str(checkout), "--out", str(out)]) == 0
    assert not (checkout / "the-module-ran").exists()
    assert (out / "system_prompt.txt").read_text() == PROMPT
    assert json.loads((out / "tools.json").read_text()) == TOOLS
    manifest = json.loads((out / "leaf-import.json").read_text())
    assert manifest["system_prompt_sha256"] == prompt_sha256(PROMPT)
    assert manifest["tools_sha256"] == tools_sha256(TOOLS)
    assert manifest["module"] == str((checkout / "frognano/harness/leaf/tools.py").resolve())
    printed = capsys.readouterr().out
    assert f"agent.system_prompt_file={out / 'system_prompt.txt'}" in printed and manifest["tools_sha256"] in printed
    ident = prompt_identity(str(out / "system_prompt.txt"), str(out / "tools.json"))
    assert (ident.origin, ident.system_prompt_sha256, ident.tools_sha256) == \
        ("vendor", manifest["system_prompt_sha256"], manifest["tools_sha256"])
    assert prompt_identity().origin == "farm"
    assert prompt_identity(str(out / "system_prompt.txt")).origin == "custom"  # farm's tools beside it
    (out / "system_prompt.txt").write_text(PROMPT + " Edited.")
    assert prompt_identity(str(out / "system_prompt.txt"), str(out / "tools.json")).origin == "custom"


@pytest.mark.parametrize("layout, given", [
    ("frognano/leaf/tools.py", "."),  # the older layout
    ("site-packages/frognano/harness/leaf/tools.py", "site-packages"),  # an installed copy
    ("site-packages/frognano/harness/leaf/tools.py", "site-packages/frognano"),
    ("frognano/harness/leaf/tools.py", "frognano/harness/leaf/tools.py"),  # the module itself
])
def test_every_layout_of_the_package_is_found(tmp_path, layout, given):
    vendor_package(tmp_path / "copy", layout)
    assert main(["leaf", "import", str(tmp_path / "copy" / given), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "system_prompt.txt").read_text() == PROMPT


def test_a_path_without_the_package_or_with_unreadable_values_is_one_line(tmp_path, capsys):
    assert main(["leaf", "import", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no vendor tools module there" in capsys.readouterr().err
    module = tmp_path / "tools.py"
    module.write_text("SYSTEM_PROMPT = build()\nOPENAI_TOOLS = []\n")
    assert main(["leaf", "import", str(module), "--out", str(tmp_path / "out")]) == 2
    assert "SYSTEM_PROMPT is not a literal" in capsys.readouterr().err
    module.write_text("SYSTEM_PROMPT = 'x'\nOPENAI_TOOLS = [{'type': 'function', 'function': {'name': 'Grep'}}]\n")
    assert main(["leaf", "import", str(module), "--out", str(tmp_path / "out")]) == 2
    assert "'Grep'; farm implements" in capsys.readouterr().err


def test_a_reproduction_with_farms_wording_warns_once_and_loudly(tmp_path, caplog):
    cfg = load_config(["experiment=reproduce-frognano", "model.base_url=http://127.0.0.1:9/v1"])
    with caplog.at_level(logging.WARNING, logger="farm.agent.leaf_import"):
        text = warn_unless_vendor_prompt(arms_of(cfg), cfg.experiment.name)
    assert text and "arm frognano-4b: farm prompt/tools" in text and "farm leaf import" in text
    assert len(caplog.records) == 1 and "!" * 40 in caplog.records[0].getMessage()
    main(["leaf", "import", str(vendor_package(tmp_path / "FrogNano")), "--out", str(tmp_path / "v")])
    cfg = load_config(["experiment=reproduce-frognano", "model.base_url=http://127.0.0.1:9/v1",
                       f"agent.system_prompt_file={tmp_path / 'v/system_prompt.txt'}",
                       f"agent.tools_file={tmp_path / 'v/tools.json'}"])
    assert warn_unless_vendor_prompt(arms_of(cfg), cfg.experiment.name) is None
    demo = load_config(["experiment=demo", "model.base_url=http://127.0.0.1:9/v1"])
    assert warn_unless_vendor_prompt(arms_of(demo), demo.experiment.name) is None  # not a reproduction


@pytest.mark.bwrap
def test_every_row_and_the_report_header_say_whose_prompt_the_run_used(tmp_path, caplog):
    main(["leaf", "import", str(vendor_package(tmp_path / "FrogNano")), "--out", str(tmp_path / "v")])
    manifest = json.loads((tmp_path / "v/leaf-import.json").read_text())
    store = tmp_path / "store"
    common = ["run.executor=local", f"store.uri={store}", "run.progress=false", "run.seeds=2",
              f"sandbox.local.root_dir={tmp_path / 'sandboxes'}", "benchmark.task_ids=[swe-paginate-off-by-one]"]
    vendor = load_config([*common, "run.id=vendor", f"agent.system_prompt_file={tmp_path / 'v/system_prompt.txt'}",
                          f"agent.tools_file={tmp_path / 'v/tools.json'}"])
    farm_own = load_config([*common, "run.id=farm", "experiment.name=reproduce-test"])
    with caplog.at_level(logging.WARNING, logger="farm.agent.leaf_import"):
        asyncio.run(run_experiment(vendor))
        assert caplog.records == []
        asyncio.run(run_experiment(farm_own))
    assert len(caplog.records) == 1  # once per run, not once per trial
    rs = ResultStore.open(str(store))
    rows = rs.read_trials("vendor").to_pylist()
    assert len(rows) == 2 and {(r["prompt_origin"], r["system_prompt_sha256"], r["tools_sha256"]) for r in rows} == \
        {("vendor", manifest["system_prompt_sha256"], manifest["tools_sha256"])}
    farm_rows = rs.read_trials("farm").to_pylist()
    ident = prompt_identity()
    assert {(r["prompt_origin"], r["system_prompt_sha256"], r["tools_sha256"]) for r in farm_rows} == \
        {("farm", ident.system_prompt_sha256, ident.tools_sha256)}
    header = {}
    for run_id in ("vendor", "farm"):
        paths = build_report([load_run(rs, run_id)], tmp_path / f"report-{run_id}")
        header[run_id] = next(line for line in paths.markdown.read_text().splitlines() if line.startswith("Prompt:"))
        assert header[run_id] in paths.html.read_text().replace("&#x27;", "'")
    assert header["vendor"].startswith("Prompt: the vendor's system prompt and tool schemas")
    assert manifest["system_prompt_sha256"][:12] in header["vendor"]
    assert header["farm"].startswith("Prompt: farm's own system prompt and tool descriptions, not the vendor's")
