# ruff: noqa: E501  (golden keys are whole command lines)
"""config_hash must not move when code moves: a resume keys on it (farm/run/driver.py
open_run refuses a run whose stored hash differs), so a refactor that changed it would make every
run started before it unresumable. These values were computed at c648c62, before the re-layout of
issue 25; a deliberate change to what a run measures updates them in the same commit, and says so
(issue 28: the FrogNano, Qwen3.5-4B, Gemma and tiny-cpu presets now ask for cached-token
details, skip unused vision towers and FrogNano pins its revision, so their entries moved).

reproduce-frognano's entries moved deliberately with issue 28.3 too: the experiment gained the arm
frognano-4b-sglang (experiment.arms is part of every arm's hash); and with issue 27.1 (strict_pair on);
and with issue 28.4, when it gained the TB2-only arm frognano-4b-timeouts-4x. The new arm fields
(``benchmarks``, ``strict``) did not move them: without that arm every entry hashes as before
(PRE_TIMEOUT_ARM below). The strict twins' entries (``-strict``) moved once more, in both tables,
when the strict overrides gained ``benchmark.seal_history=true`` (issue 27: strict seals a task
image's own history); the standard arms and the run itself did not move.

Arms whose overrides name a prompt file are left out: their hash holds the file's resolved
absolute path, so it differs between checkouts."""

from __future__ import annotations

import pytest

from farm.config import config_hash, load_config
from farm.config.arms import arms_of

URL = "model.base_url=http://127.0.0.1:9/v1"

GOLDEN = {
    '': '648d881725984153',
    'agent=leaf model.base_url=http://127.0.0.1:9/v1': '10828214806876bb',
    'agent=nop': '49aaf49627f22705',
    'agent=oracle': 'ddf2e25acc7fcbd4',
    'agent=predictions agent.predictions=preds.jsonl': 'c255dd9eb9d2496c',  # issue 37: a new preset, no entry moved
    'agent=scripted agent.script=conf/agent/scripted.yaml': '6688e47ed1f38c09',
    'benchmark=builtin': '648d881725984153',
    'benchmark=patch_eval_verified': 'ff7015edde64d1b3',
    'benchmark=patcheval': 'ff7015edde64d1b3',
    'benchmark=patcheval-verified': 'ff7015edde64d1b3',
    'benchmark=patcheval_verified': 'ff7015edde64d1b3',
    'benchmark=swebench-pro': '36a696b59752a597',
    'benchmark=swebench-verified': '8589bd19c419e661',
    'benchmark=swebench_pro': '36a696b59752a597',
    'benchmark=swebench_verified': '8589bd19c419e661',
    'benchmark=terminal-bench-2-verified': '33eee21f57f973bb',
    'benchmark=terminal-bench-2': '33eee21f57f973bb',
    'benchmark=terminal_bench_2': '33eee21f57f973bb',
    'benchmark=terminal_bench_2_verified': '33eee21f57f973bb',
    'experiment=ablate-parallel-tools model.base_url=http://127.0.0.1:9/v1': 'c8eeea7e88023672',
    'experiment=ablate-parallel-tools model.base_url=http://127.0.0.1:9/v1 [arm leaf-default]': 'c8eeea7e88023672',
    'experiment=ablate-parallel-tools model.base_url=http://127.0.0.1:9/v1 [arm no-parallel-calls]': '7cf4b56c0181097e',
    'experiment=ablate-parallel-tools model.base_url=http://127.0.0.1:9/v1 [arm concurrent-execution]': '6f1106763bb4eebc',
    'experiment=demo': '7753b29e76baf4dd',
    'experiment=demo [arm oracle]': 'a0c6c232154627f5',
    'experiment=frognano-vs-gemma': '69ebf3f156de3f05',
    'experiment=frognano-vs-gemma [arm frognano-4b]': '15c4ed9cf1b27a10',
    'experiment=frognano-vs-gemma [arm gemma-4-12b]': '6cc6df7613f12f8e',
    'experiment=real-qwen-coder-sizes': 'e5d0c8c6b29ea37f',
    'experiment=real-qwen-coder-sizes [arm qwen2.5-coder-0.5b]': '4b2e1c367d9eb334',
    'experiment=real-qwen-coder-sizes [arm qwen2.5-coder-1.5b]': '21ffdae02e124ac0',
    # strict_pair turned on in reproduce-frognano (issue 27): a deliberate change; with it off
    # the preset and its arms hash as they did before
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1': '9787e28fa994dc06',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b]': '93214e35fc627984',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm qwen3.5-4b]': '6e3080b55fc5e3af',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b-card]': '93214e35fc627984',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b-strict]': 'dc132e198e71cab4',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm qwen3.5-4b-strict]': '79909c51301dd33a',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b-card-strict]': 'dc132e198e71cab4',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 experiment.strict_pair=false': '70dce1b038fe9fc1',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 experiment.strict_pair=false [arm frognano-4b]': 'c4501b399c3ed6be',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 experiment.strict_pair=false [arm qwen3.5-4b]': '664d52e601f15f1b',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 experiment.strict_pair=false [arm frognano-4b-card]': 'c4501b399c3ed6be',
    'model=endpoint': 'fa737e53ed5b820d',
    'model=frognano-4b': '1672b20e89652369',
    'model=gemma-4-12b': 'ffb9731a647233e1',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b-sglang]': '581a18cae1e7739a',
    'model=frognano-4b-sglang': 'b8c5b67c6d79b0ce',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b-timeouts-4x]': 'ff35c501c0211dbd',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 experiment.strict_pair=false [arm frognano-4b-timeouts-4x]': 'cbf38b82d5af8364',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b-sglang-strict]': '4c40585716310b5e',
    'model=qwen2.5-coder-0.5b-cpu': 'bd6b7248ef8befa8',
    'model=qwen2.5-coder-1.5b-cpu': '9f79e547c2be4f49',
    'model=qwen3.5-4b': '0b6bc0689896129c',
    'model=tiny-cpu': 'd0ffaa814c65733c',
    'sandbox=docker': 'b05264594c5ae530',
    'sandbox=kubernetes': '78b8d2df5d69a597',
    'sandbox=local': '648d881725984153',
    'agent=leaf model=frognano-4b benchmark=swebench-verified sandbox=kubernetes model.base_url=http://127.0.0.1:9/v1': '0eea75aa35cef00c',
    'agent=leaf model=qwen2.5-coder-0.5b-cpu sandbox=docker grade.mode=both model.base_url=http://127.0.0.1:9/v1': '7aed02f1fb60d485',
}


# reproduce-frognano's entries before it gained the arm frognano-4b-timeouts-4x (issue 28.4): the
# same config without that arm must still hash so, or the arm fields entered every arm's hash
PRE_TIMEOUT_ARM = {
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1': '3a00040f82587abb',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b]': 'a385b30e95bdcd60',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm qwen3.5-4b]': '9bb05d84fff35822',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b-card]': 'a385b30e95bdcd60',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b-strict]': '797065ef5d9c18ef',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm qwen3.5-4b-strict]': 'ee007e1cdb57626d',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b-card-strict]': '797065ef5d9c18ef',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 experiment.strict_pair=false': 'f29dd058defe5fcd',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 experiment.strict_pair=false [arm frognano-4b]': 'f578584c9e24ce75',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 experiment.strict_pair=false [arm qwen3.5-4b]': 'f2fb22860e12ffb4',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 experiment.strict_pair=false [arm frognano-4b-card]': 'f578584c9e24ce75',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b-sglang]': '74402d6cce2ad11a',
    'experiment=reproduce-frognano model.base_url=http://127.0.0.1:9/v1 [arm frognano-4b-sglang-strict]': 'b7dd50e61b87c7bf',
}


def _hash_of(case: str) -> str:
    words, _, arm = case.partition(" [arm ")
    overrides = [w for w in words.split(" ") if w]
    cfg = load_config(overrides)
    if not arm:
        return config_hash(cfg)
    return config_hash(dict(arms_of(cfg))[arm.rstrip("]")])


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_config_hash_is_unchanged(case: str) -> None:
    assert _hash_of(case) == GOLDEN[case]


def test_every_preset_is_pinned() -> None:
    """A new preset joins the golden table (or this test says which one is missing)."""
    from farm.config import conf_dir

    for group in ("agent", "benchmark", "model", "sandbox"):
        for path in sorted((conf_dir() / group).glob("*.yaml")):
            assert any(f"{group}={path.stem}" in case for case in GOLDEN), f"{group}={path.stem} has no golden config_hash"


@pytest.mark.parametrize("case", sorted(PRE_TIMEOUT_ARM))
def test_arm_fields_left_at_their_defaults_do_not_enter_the_hash(case: str) -> None:
    """``experiment.arms[].benchmarks`` / ``.strict`` are hashed only where an arm sets them
    (HASHED_UNLESS_DEFAULT): reproduce-frognano without its one arm that sets them hashes as it
    did before the fields existed, run and arms alike."""
    words, _, arm = case.partition(" [arm ")
    cfg = load_config([w for w in words.split(" ") if w])
    cfg.experiment.arms = [a for a in cfg.experiment.arms if a.name != "frognano-4b-timeouts-4x"]
    got = config_hash(dict(arms_of(cfg))[arm.rstrip("]")]) if arm else config_hash(cfg)
    assert got == PRE_TIMEOUT_ARM[case]


def test_an_arms_benchmarks_and_strict_enter_the_hash_when_set() -> None:
    """Which trials a run has is part of what it is: a resume with another restriction is refused."""
    cfg = load_config(["experiment=reproduce-frognano", URL])
    base = config_hash(cfg)
    (arm,) = [a for a in cfg.experiment.arms if a.name == "frognano-4b-timeouts-4x"]
    arm.benchmarks = []
    assert config_hash(cfg) != base
    arm.benchmarks, arm.strict = ["terminal_bench_2_verified"], True
    assert config_hash(cfg) != base
