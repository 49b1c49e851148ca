"""Raw model outputs through the vLLM parsers farm configures, then through the real agent loop.

Each row is a text a Qwen3-style model might emit. Step 1 parses it exactly as the vLLM server
would for the frognano-4b preset (ParserManager composes the preset's tool_call_parser and
reasoning_parser; the request carries the agent's own five tool schemas, so type coercion is
the real one). Step 2 serves the parsed message from farm's scripted policy endpoint and runs
the real agent loop against a bubblewrap sandbox, recording what the agent then did. Every row
must end in a defined outcome: an observation the model can react to, or a closed exit reason.

Skipped, with the reason, where vLLM is not installed (the default venv without the serving
stack), and a failure there under FARM_REQUIRE_SERVE=1; scripts/install-serve-cpu.sh installs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from farm.agent import run_agent
from farm.agent.llm import LLMClient
from farm.agent.policies.server import start_policy_server
from farm.agent.tools import load_tools
from farm.config import AgentConfig, ModelConfig, load_config
from farm.sandbox.local.sandbox import LocalSandbox
from farm.tasks.model import Environment, Task, VerifierSpec

pytestmark = pytest.mark.serve_stack("vllm")  # the parsers under test are vLLM's own

T = "<think>\nI should look around.\n</think>\n\n"


def call(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


# id, raw model text, parsed calls [(name, args)], parsed reasoning, what the agent does:
# (exit_reason, executed tool messages, observation snippet per call, tool_parse_failures)
CASES: list[tuple[str, str, list[tuple[str, dict[str, Any]]], str | None, tuple[str, int, list[str], int]]] = [
    ("single", T + call("Bash", ("command", "echo one"), ("timeout", "30")),
     [("Bash", {"command": "echo one", "timeout": 30})], "\nI should look around.\n",
     ("agent", 1, ["one"], 0)),
    ("parallel",
     T + call("Bash", ("command", "echo a")) + "\n" + call("Write", ("file_path", "/app/w.txt"), ("content", "hi")),
     [("Bash", {"command": "echo a"}), ("Write", {"file_path": "/app/w.txt", "content": "hi"})],
     "\nI should look around.\n",
     ("agent", 2, ["a", "w.txt"], 0)),
    # A <tool_call> inside the thinking block ends the reasoning implicitly.
    ("call_inside_think", "<think>\nlet me check\n" + call("Bash", ("command", "echo in-think")),
     [("Bash", {"command": "echo in-think"})], "\nlet me check\n",
     ("agent", 1, ["in-think"], 0)),
    # A bare <function=...> without the <tool_call> opener is still a call.
    ("missing_opener", T + "<function=Bash>\n<parameter=command>\necho bare\n</parameter>\n</function>\n</tool_call>",
     [("Bash", {"command": "echo bare"})], "\nI should look around.\n",
     ("agent", 1, ["bare"], 0)),
    # A parameter never closed before </function> is dropped by vllm 0.32's qwen3 grammar: the
    # call arrives with {} and the tool answers with an error observation; the missing required
    # parameter counts as a parse failure.
    ("unterminated_parameter",
     T + "<tool_call>\n<function=Bash>\n<parameter=command>\necho lost\n</function>\n</tool_call>",
     [("Bash", {})], "\nI should look around.\n",
     ("agent", 1, ["command is required"], 1)),
    # Output cut off mid-call (e.g. max_tokens): same as above.
    ("truncated_call", T + "<tool_call>\n<function=Bash>\n<parameter=command>\necho cut",
     [("Bash", {})], "\nI should look around.\n",
     ("agent", 1, ["command is required"], 1)),
    # Typed parameters: the tool schema says timeout is a number; a non-number stays a string,
    # and under the default agent.compat=leaf-2609 the attempt fails as the vendor's harness
    # fails it (its timeout parse raises): tool_error, no observation (docs/agent.md)
    ("typed_parameter_bad", T + call("Bash", ("command", "echo typed"), ("timeout", "soon")),
     [("Bash", {"command": "echo typed", "timeout": "soon"})], "\nI should look around.\n",
     ("tool_error", 0, [], 0)),
    ("unknown_tool", T + call("Nope", ("x", "1")),
     [("Nope", {"x": "1"})], "\nI should look around.\n",
     ("agent", 1, ["Unknown tool: Nope"], 0)),
    # Hermes-style JSON inside <tool_call> is not this parser's grammar: vLLM drops the block
    # (no call, no content), so the agent sees an empty final answer and stops cleanly.
    ("json_in_tool_call", T + '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>',
     [], "\nI should look around.\n",
     ("agent", 0, [], 0)),
    ("plain_answer", T + "All done.", [], "\nI should look around.\n", ("agent", 0, [], 0)),
]


@pytest.fixture(scope="module")
def parser_factory(tmp_path_factory):
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser import ParserManager

    from farm.serve.tiny_model import _tokenizer

    ek = load_config(["model=frognano-4b"]).model.serving.engine_kwargs
    tok_dir = tmp_path_factory.mktemp("tok")
    _tokenizer(tok_dir)
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    parser_cls = ParserManager.get_parser(
        tool_parser_name=ek["tool_call_parser"], reasoning_parser_name=ek["reasoning_parser"],
        enable_auto_tools=True, tokenizer=tok,
    )
    request = ChatCompletionRequest(
        model="m", messages=[{"role": "user", "content": "x"}], tools=load_tools(None), tool_choice="auto",
    )

    def parse(text: str) -> tuple[str | None, str | None, list[tuple[str, dict[str, Any]]]]:
        parser = parser_cls(tok, request.tools, chat_template_kwargs={"enable_thinking": True})
        ids = tok.encode(text, add_special_tokens=False)
        reasoning, content, calls = parser.parse(text, request, enable_auto_tools=True, model_output_token_ids=ids)
        return reasoning, content, [(c.name, json.loads(c.arguments)) for c in calls or []]

    return parse


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
async def test_vllm_parser_then_agent_loop(case, parser_factory, tmp_path: Path):
    name, raw, want_calls, want_reasoning, (want_exit, want_tool_msgs, want_obs, want_failures) = case
    reasoning, content, calls = parser_factory(raw)
    assert calls == want_calls
    assert reasoning == want_reasoning

    turn: dict[str, Any] = {"content": content, "reasoning": reasoning}
    if calls:
        turn["tool_calls"] = [{"name": n, "arguments": json.dumps(a)} for n, a in calls]
    script = tmp_path / "script.json"
    script.write_text(json.dumps([turn, {"content": "finished"}]))
    server = start_policy_server("scripted", script=str(script))
    task = Task(
        benchmark="test", task_id=name, instruction="probe", environment=Environment(workdir="/app", build_steps=()),
        verifier=VerifierSpec(), agent_timeout_s=120.0,
    )
    sandbox = LocalSandbox(task, root_dir=tmp_path / "sbx")
    await sandbox.start()
    try:
        model = ModelConfig(name="policy", base_url=server.base_url, max_retries=0)
        llm = LLMClient(model, session_id="s", task_id=name)
        traj = await run_agent(task, sandbox, llm, AgentConfig(tokenizer="bytes", max_steps=4), session_id="s")
    finally:
        await sandbox.close()
        server.close()

    tool_msgs = [m for m in traj.messages if m["role"] == "tool"]
    assert traj.exit_reason == want_exit, (traj.exit_reason, traj.error)
    assert len(tool_msgs) == want_tool_msgs
    for msg, snippet in zip(tool_msgs, want_obs):
        assert snippet in msg["content"], msg["content"]
    assert traj.counters.tool_parse_failures == want_failures
    if reasoning:  # resent to the model under the key Qwen templates read
        assert traj.messages[2].get("reasoning_content") == reasoning
