"""The differential suite: the vendor's tool observations and file states, recorded by running
its own tool runner (tests/fixtures/leaf/differential/README.md), replayed through farm's real
tool path: ToolExecutor (the host side, where the vendor's harness parses Bash timeouts) ->
LocalSandbox (bubblewrap), or a podman container for a sample -> the sandbox agent -> leaf_tools
/ leaf_vendor.

Under agent.compat=leaf-2609 and leaf-legacy every case must match its transport's vectors
exactly (observation or tool_error per call, and every path, mode and byte of the case's files
after the calls). Under farm-safe, every case tagged with a difference in the corpus must differ
from the vendor (the switch is real), and every untagged case must still match.
"""

from __future__ import annotations

import json
import time

import pytest
from agent_helpers import agent_cfg
from leaf_differential import SETUP_PROGRAM, SNAPSHOT_PROGRAM, call_args, load_corpus, load_vectors, placeholders

from farm.agent.execution import ToolCall, ToolExecutor
from farm.config import CHOICES, AgentConfig
from farm.sandbox.base import Sandbox
from farm.sandbox.relayed import manifests as m
from tests.support.podman import PodmanBackend, podman_task

CASES = load_corpus()
COMPATS = ("leaf-2609", "leaf-legacy", "farm-safe")
# what each `differs` tag of the corpus names (docs/agent.md, "Where farm differs from Leaf")
DIFFERENCES = {
    "umask": "files and directories farm-safe creates get the agent's umask (644/755), not 077/022",
    "coercion": "farm-safe validates arguments (errors naming the field), the vendor coerces with str()/int()",
    "paths": "farm-safe normalises `..` before use and shows symlinks by their own name",
    "edit_text": "farm-safe keeps undecodable bytes and CRLF through an Edit",
    "bash_text": "farm-safe shows non-UTF-8 Bash output with U+FFFD, keeps \\r, and reports 128+N for a signal",
    "bash_timeout": "farm-safe kills everything a timed-out Bash call started, not only its shell",
    "tool_error": "farm-safe answers an unparseable Bash timeout with an observation instead of failing the attempt",
}


async def replay(sb: Sandbox, case: dict, n: int, compat: str, python: str = "python3") -> dict:
    """The case run through farm: its observations (or tool_error) and its file state.
    ``python``: an interpreter in the sandbox for the set-up and snapshot programs."""
    case_dir = f"/tmp/diff/{compat}/c{n}"
    spec = json.dumps({"case": case_dir, "files": case.get("files") or {}})
    setup = await sb.exec(f"{python} -I -S -c {_q(SETUP_PROGRAM)} {_q(spec)}")
    assert setup.exit_code == 0, setup.output
    executor = ToolExecutor(sb, f"{case_dir}/ws", AgentConfig(compat=compat, tokenizer="bytes"))
    observations = []
    for i, call in enumerate(case["calls"]):
        name, args, pause = call_args(call, case_dir)
        time.sleep(pause)
        tc = ToolCall.from_openai({"id": f"c{i}", "function": {"name": name, "arguments": json.dumps(args)}})
        (outcome,) = await executor.run_turn([tc])
        if outcome.failure:
            observations.append({"tool_error": placeholders(outcome.failure, case_dir)})
            break  # the trial ends with tool_error there, as the vendor's rollout does
        observations.append({"observation": placeholders(outcome.observation, case_dir)})
    snap = await sb.exec(f"{python} -I -S -c {_q(SNAPSHOT_PROGRAM)} {_q(case_dir)}")
    assert snap.exit_code == 0, snap.output
    await sb.kill_leftovers()  # a timed-out call's background job must not reach the next case
    return {"observations": observations, "state": json.loads(snap.stdout)}


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def test_corpus_tags_name_documented_differences():
    tags = {t for c in CASES for t in c.get("differs", [])}
    assert tags <= set(DIFFERENCES), tags - set(DIFFERENCES)
    assert set(DIFFERENCES) <= tags, "a documented difference without a case"
    assert CHOICES["agent.compat"] == COMPATS


def test_vectors_cover_the_corpus():
    for compat in ("leaf-2609", "leaf-legacy"):
        vectors = load_vectors(compat)
        assert [c["id"] for c in CASES] == list(vectors), compat


def _sample() -> list[tuple[int, dict]]:
    """The first case of every difference and of every tool: the quick replay's share."""
    picked: dict[str, int] = {}
    for n, case in enumerate(CASES):
        for key in case.get("differs") or [case["id"].split("-")[0]]:
            picked.setdefault(key, n)
    return [(n, CASES[n]) for n in sorted(set(picked.values()))]


@pytest.mark.parametrize("compat", COMPATS)
async def test_replay_sample_matches_the_vendor(sandbox, compat):
    await _replay_and_compare(sandbox[0], compat, _sample())


@pytest.mark.integration  # all 141 cases: about 2.5 min per setting on 2 busy cores
@pytest.mark.parametrize("compat", COMPATS)
async def test_replay_matches_the_vendor(sandbox, compat):
    await _replay_and_compare(sandbox[0], compat, list(enumerate(CASES)))


@pytest.mark.integration  # a real container (podman + runc) whose image has no Python of its own
@pytest.mark.usefixtures("podman_env")
@pytest.mark.parametrize("compat", COMPATS)
async def test_replay_sample_matches_the_vendor_in_a_container(compat):
    sb = PodmanBackend().make(podman_task(network="no-network", workdir="/app"), "no-network")
    await sb.start()
    try:
        await _replay_and_compare(sb, compat, _sample(), python=m.PYTHON)  # the toolbox's own Python
    finally:
        await sb.close()


@pytest.mark.integration  # the Kubernetes backend through the API-server emulator (real client, real HTTP)
@pytest.mark.bwrap
@pytest.mark.root
@pytest.mark.tools("nsenter")
@pytest.mark.parametrize("compat", COMPATS)
async def test_replay_sample_matches_the_vendor_in_an_emulated_pod(compat, tmp_path):
    # under farm-safe this found that in a pod (no jail's init) a timed-out call's killed child
    # stayed a zombie until the agent's next reaper round, so `kill -0` still called it alive
    from tests.support.kubernetes import EmulatorBackend, image_task

    cluster = EmulatorBackend(tmp_path / "emulator")
    try:
        sb = cluster.make(image_task(network="no-network"), "no-network")
        await sb.start()
        try:
            await _replay_and_compare(sb, compat, _sample(), python=m.PYTHON)
        finally:
            await sb.close()
    finally:
        cluster.close()
    assert cluster.emu.errors == [], cluster.emu.errors[0]


async def _replay_and_compare(sb: Sandbox, compat: str, cases: list[tuple[int, dict]],
                              python: str = "python3") -> None:
    vectors = load_vectors("leaf-legacy" if compat == "leaf-legacy" else "leaf-2609")
    mismatched, undifferent = [], []
    for n, case in cases:
        got = await replay(sb, case, n, compat, python)
        want = {"observations": vectors[case["id"]]["observations"], "state": vectors[case["id"]]["state"]}
        if compat == "farm-safe" and case.get("differs"):
            if got == want:
                undifferent.append(case["id"])
        elif got != want:
            mismatched.append((case["id"], got, want))
    detail = "\n".join(f"{cid}:\n  farm:   {json.dumps(g)[:1500]}\n  vendor: {json.dumps(w)[:1500]}"
                       for cid, g, w in mismatched)
    assert not mismatched, f"{len(mismatched)} of {len(cases)} cases differ under {compat}:\n{detail}"
    assert not undifferent, f"farm-safe shows none of its documented difference in {undifferent}"


def test_compat_is_validated():
    from farm.config import load_config
    from farm.errors import ConfigError

    with pytest.raises(ConfigError, match=r"'leaf-2510' for 'agent\.compat'"):
        load_config(overrides=["agent.compat=leaf-2510"])
    assert agent_cfg().compat == "leaf-2609"


@pytest.mark.parametrize("compat", COMPATS)
def test_every_row_records_the_compat_setting(compat):
    from agent_helpers import make_task

    from farm.config import load_config
    from farm.run.plan import TrialSpec
    from farm.run.rows import base_row
    from farm.store.schema import TRIALS_SCHEMA

    cfg = load_config(overrides=[f"agent.compat={compat}"])
    spec = TrialSpec("r1", "k", "test", "t1", 0, "a", "m")
    assert base_row(spec, 1, cfg, make_task(), uid="u").agent_compat == compat
    assert "agent_compat" in TRIALS_SCHEMA.names
