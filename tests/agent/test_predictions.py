"""Reading SWE-bench predictions files (farm/agent/predictions.py): the harness's three formats,
bad input named by field and value, the three published submissions in ../shared, and the
harness's apply commands taken from the package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.agent import predictions as pr
from farm.errors import ConfigError
from tests.shared import shared_path

ROWS = [
    {"instance_id": "a__a-1", "model_name_or_path": "m", "model_patch": "diff --git a/x b/x\n"},
    {"instance_id": "b__b-2", "model_name_or_path": "m", "model_patch": None},
]


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


@pytest.mark.parametrize("name, text", [
    ("preds.jsonl", "".join(json.dumps(r) + "\n" for r in ROWS)),
    ("preds.json", json.dumps(ROWS, indent=1)),  # a JSON list
    ("preds.json", json.dumps({r["instance_id"]: r for r in ROWS})),  # SWE-agent's: keyed by instance id
    ("keyed.json", json.dumps({r["instance_id"]: {k: v for k, v in r.items() if k != "instance_id"} for r in ROWS})),
    ("lines.json", "\n".join(json.dumps(r) for r in ROWS) + "\n\n"),  # JSON lines under a .json name
])
def test_every_format_of_the_harness_reads_the_same(tmp_path: Path, name: str, text: str) -> None:
    preds = pr.load_predictions(_write(tmp_path, name, text))
    assert sorted(preds.by_id) == ["a__a-1", "b__b-2"] and preds.model == "m"
    assert preds.by_id["a__a-1"].patch == "diff --git a/x b/x\n"
    assert preds.by_id["b__b-2"].patch == ""  # null is "no patch", as the harness reads it
    assert len(preds.sha256) == 64


def test_one_prediction_on_one_line_is_json_lines(tmp_path: Path) -> None:
    preds = pr.load_predictions(_write(tmp_path, "one.jsonl", json.dumps(ROWS[0]) + "\n"))
    assert list(preds.by_id) == ["a__a-1"]


@pytest.mark.parametrize("text, message", [
    ('{"model_name_or_path": "m", "model_patch": ""}\n', r"line 1: invalid value None for 'instance_id'"),
    ('{"instance_id": "x", "model_patch": ""}\n', r"line 1 \(x\): invalid value None for 'model_name_or_path'"),
    ('{"instance_id": "x", "model_name_or_path": "m"}\n', r"line 1 \(x\): no 'model_patch'"),
    ('{"instance_id": "x", "model_name_or_path": "m", "model_patch": 3}\n', r"type int for 'model_patch'"),
    ('[{"instance_id": "x", "model_name_or_path": "m", "model_patch": ""}, "y"]',
     r"item 1: a prediction must be a JSON object .* got str 'y'"),
    ('{"x": {"instance_id": "z", "model_name_or_path": "m", "model_patch": ""}}', r"key 'x': .* filed under 'x'"),
    ("instance_id,model_patch\nx,\n", r"line 1: not valid JSON .*JSON lines, a JSON list, or a JSON object"),
    ('[{"instance_id": "x",', r"not valid JSON: .*line 1"),
    ("", "the file is empty"),
    ("[]", "holds no predictions"),
    ('{"instance_id": "x", "model_name_or_path": "m", "model_patch": ""}\n'
     '{"instance_id": "x", "model_name_or_path": "m", "model_patch": ""}\n', r"line 2: instance_id 'x' appears twice"),
    ('{"instance_id": "x", "model_name_or_path": "m", "model_patch": ""}\n'
     '{"instance_id": "y", "model_name_or_path": "n", "model_patch": ""}\n', r"names 2 models .*split the file"),
])
def test_bad_input_is_one_error_naming_the_field_and_value(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, "bad.jsonl", text)
    with pytest.raises(ConfigError, match=message) as err:
        pr.load_predictions(path)
    assert str(err.value).startswith(f"agent.predictions={path!r}")


def test_a_missing_or_undecodable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        pr.load_predictions(tmp_path / "nope.jsonl")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"instance_id": "caf\xe9"}\n')
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 20\)"):
        pr.load_predictions(tmp_path / "latin1.jsonl")


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = _write(tmp_path, "p.jsonl", json.dumps(ROWS[0]) + "\n")
    assert list(pr.load_predictions(path).by_id) == ["a__a-1"]
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert len(pr.load_predictions(path).by_id) == 2


def test_patch_bytes_are_utf8_and_surrogate_escapes_go_back_to_their_bytes() -> None:
    assert pr.Prediction("x", "m", "caf\u00e9\n").patch_bytes() == b"caf\xc3\xa9\n"  # what write_text writes
    stored = b"+caf\xe9\n".decode("utf-8", errors="surrogateescape")  # how farm carries a latin-1 byte
    assert pr.Prediction("x", "m", json.loads(json.dumps(stored))).patch_bytes() == b"+caf\xe9\n"


def test_the_keys_and_the_apply_commands_are_the_packages() -> None:
    from swebench.harness.constants import DOCKER_PATCH, KEY_INSTANCE_ID, KEY_MODEL, KEY_PREDICTION
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    assert (pr.INSTANCE_ID, pr.MODEL, pr.PATCH) == (KEY_INSTANCE_ID, KEY_MODEL, KEY_PREDICTION)
    command = pr.apply_command()
    # each of the harness's commands, in its order, on its patch path
    at = [command.index(f"'{c}'") for c in GIT_APPLY_CMDS]
    assert at == sorted(at) and f"$c {DOCKER_PATCH}" in command


SUBMISSIONS = {  # directory: (predictions, model_name_or_path, empty patches)
    "20241028_agentless-1.5_gpt4o": (500, "agentless", 4),
    "20241108_autocoderover-v2.0-claude-3-5-sonnet-20241022": (496, "autocoderover-v2.0-claude-3-5-sonnet-20241022", 0),
    "20250206_agentscope": (498, "agentscope-swe", 0),
}


@pytest.mark.parametrize("submission", sorted(SUBMISSIONS))
def test_the_published_submissions_parse(submission: str) -> None:
    path = shared_path("fixtures", "swebench-verified", "predictions", submission, "preds.jsonl")
    preds = pr.load_predictions(path)
    n, model, empty = SUBMISSIONS[submission]
    assert (len(preds.by_id), preds.model) == (n, model)
    assert sum(1 for p in preds.by_id.values() if not p.patch) == empty
    assert all(p.patch.startswith("diff --git") for p in preds.by_id.values() if p.patch)
