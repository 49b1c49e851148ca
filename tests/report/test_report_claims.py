"""The claims registry: conf/claims matches the reference sheet; bad files name the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from farm.errors import ConfigError
from farm.report.claims import DEFAULT_CLAIMS_DIR, load_claims
from tests.shared import shared_path


def test_default_claims_match_the_reference_sheet():
    ref = yaml.safe_load(shared_path("reference", "claims.yaml").read_text())["models"]
    reg = load_claims()
    for model, entry in ref.items():
        for bench, value in (entry.get("claims") or {}).items():
            claim = reg.claim_for(model, bench)
            assert claim is not None, (model, bench)
            assert claim.value == pytest.approx(value)
    fn = ref["frognano-4b-2609"]
    ladder = next(lad for lad in reg.ladders if lad.name == "rl")
    assert [p.value for p in ladder.points] == [fn["rl_ladder"]["base"], *fn["rl_ladder"]["iterations"]]
    appendix = next(lad for lad in reg.ladders if lad.name == "rl_appendix")
    assert [p.value for p in appendix.points] == fn["rl_ladder_appendix"]["iterations"]
    assert reg.parallel_rates["frognano-4b-2609"].value == fn["parallel_tool_call_rate_pct"]
    assert reg.claim_for("frognano-4b-2609", "codeforces_elo") is None
    assert reg.claim_for("gemma-4-12b", "codeforces_elo").unit == "elo"


def test_aliases_match_hub_ids_and_benchmark_spellings():
    reg = load_claims(DEFAULT_CLAIMS_DIR)
    c = reg.claim_for("microsoft/FrogNano-4B-2609", "swebench-verified")
    assert c is not None and c.value == 61.5 and c.metric == "avg@3" and c.k == 3
    assert reg.claim_for("Qwen/Qwen3.5-4B", "SWE-bench Verified").value == 39.4
    assert reg.claim_for("unknown-model", "swebench_verified") is None


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_user_files_extend_the_registry(tmp_path):
    _write(tmp_path, "a.yaml", "benchmarks:\n  mybench: {tasks: 10, aliases: [my-bench]}\n")
    _write(
        tmp_path,
        "b.yaml",
        "models:\n  my-model:\n    aliases: [org/My-Model]\n    claims:\n"
        "      my-bench: {value: 12.5, metric: avg@1, source: our paper}\n",
    )
    reg = load_claims(tmp_path)
    c = reg.claim_for("org/my-model", "mybench")
    assert c is not None and c.value == 12.5 and c.benchmark == "mybench"


@pytest.mark.parametrize(
    "text,where,what",
    [
        ("models:\n  m:\n    claims:\n      b: {value: abc, metric: avg@3, source: s}\n",
         "models.m.claims.b.value", "'abc'"),
        ("models:\n  m:\n    claims:\n      b: {value: 1, source: s}\n", "models.m.claims.b.metric", "missing"),
        ("models:\n  m:\n    claims:\n      b: {value: 1, metric: avg@3, source: s, vlaue: 2}\n",
         "models.m.claims.b.vlaue", "unknown field"),
        ("models:\n  m:\n    claim: {}\n", "models.m.claim", "unknown field"),
        ("models:\n  m:\n    ladder:\n      rl: {benchmark: b, metric: avg@3, source: s, "
         "points: [{label: x, value: true}]}\n",
         "models.m.ladder.rl.points[0].value", "True"),
        ("benchmarks:\n  b: {tasks: -3}\n", "benchmarks.b.tasks", "-3"),
        ("models: [1, 2]\n", "models", "expected a mapping"),
        ("modles: {}\n", "<top>.modles", "unknown field"),
    ],
)
def test_bad_field_is_named(tmp_path, text, where, what):
    path = _write(tmp_path, "bad.yaml", text)
    with pytest.raises(ConfigError) as exc:
        load_claims(tmp_path)
    msg = str(exc.value)
    assert str(path) in msg and where in msg and what in msg


def test_duplicate_model_across_files_is_an_error(tmp_path):
    body = "models:\n  m:\n    claims: {}\n"
    _write(tmp_path, "a.yaml", body)
    _write(tmp_path, "b.yaml", body)
    with pytest.raises(ConfigError, match="already defined in .*a.yaml"):
        load_claims(tmp_path)


def test_invalid_yaml_and_missing_directory(tmp_path):
    _write(tmp_path, "x.yaml", "models: {a: [\n")
    with pytest.raises(ConfigError, match="x.yaml: not valid YAML"):
        load_claims(tmp_path)
    with pytest.raises(ConfigError, match="claims_dir"):
        load_claims(tmp_path / "nope")
