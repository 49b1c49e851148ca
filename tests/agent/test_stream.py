"""Streamed model requests: the same trajectory as whole-body answers, plus per-step timing.

Both paths talk to farm's real policy server (uvicorn on 127.0.0.1), which answers a
``stream: true`` request with server-sent events cut from the very completion it would
otherwise send whole.
"""

from __future__ import annotations

import dataclasses
import json

from agent_helpers import agent_cfg

from farm.agent import run_agent
from farm.agent.llm import parse_completion
from farm.agent.policies.server import stream_chunks
from farm.agent.stream import StreamAssembler

# Reasoning under both servers' keys, parallel calls, malformed arguments, explicit ids (a
# policy draws random ids otherwise), cached tokens and a server queue time, then an answer.
TURNS = [
    {"reasoning": "look first", "content": "Let me look.",
     "tool_calls": [{"id": "c1", "name": "Bash", "arguments": {"command": "echo one > /app/a.txt"}},
                    {"id": "c2", "name": "Bash", "arguments": {"command": "printf 'two\\n'"}}],
     "usage": {"prompt_tokens_details": {"cached_tokens": 11}}, "metrics": {"queue_time_ms": 250},
     "delay_s": 0.3},  # longer than the queue time it reports: a queue is part of the call
    {"reasoning": "now read", "reasoning_field": "reasoning_content",
     "tool_calls": [{"id": "c3", "name": "Read", "arguments": {"file_path": "/app/a.txt"}},
                    {"id": "c4", "name": "Bash", "arguments": "{\"command\": \"echo broken"}]},
    {"tool_calls": [{"id": "c5", "name": "Glob", "arguments": {"pattern": "*.txt", "path": "/app"}}]},
    {"content": "All done: one and two.", "usage": {"prompt_tokens_details": {"cached_tokens": 40}}},
]


def _without_timing(traj) -> dict:
    """The trajectory as data, minus what a clock or the transport decides."""
    data = traj.to_json()
    data.pop("elapsed_s")
    for key in ("llm_s", "tool_s", "generation_s"):
        data["counters"].pop(key)
    for step in data["steps"]:
        for key in ("latency_s", "tool_s", "ttft_s", "decode_s", "request_wait_s"):
            step.pop(key)
        for call in step["tool_calls"]:
            for key in ("duration_s", "command_s", "started", "ended"):
                call.pop(key)
    return data


async def test_streamed_and_whole_answers_give_the_same_trajectory(sandbox, policy, llm_for):
    sb, task = sandbox
    runs = {}
    for stream in (True, False):
        srv = policy(TURNS)
        llm = llm_for(srv, stream=stream)
        runs[stream] = await run_agent(task, sb, llm, agent_cfg(tokenizer="bytes"), session_id="s")
        sent = [body for _, body in srv.requests()]
        assert all(bool(b.get("stream")) is stream for b in sent)
        if stream:
            assert all(b["stream_options"] == {"include_usage": True} for b in sent)
    streamed, whole = runs[True], runs[False]
    assert streamed.exit_reason == "agent" and streamed.counters.steps == 4
    assert streamed.counters.tool_parse_failures == 1  # the broken arguments, parsed alike
    assert streamed.messages[2]["tool_calls"][1]["function"]["arguments"] == '{"command": "printf \'two\\\\n\'"}'
    assert streamed.messages[2]["reasoning_content"] == "look first"
    assert _without_timing(streamed)["counters"] == _without_timing(whole)["counters"]
    assert _without_timing(streamed) == _without_timing(whole)
    # what only a stream shows: time to first token and decode time, on every streamed step
    assert all(s.ttft_s is not None and s.ttft_s > 0 and s.decode_s is not None and s.decode_s >= 0
               for s in streamed.steps)
    assert all(s.ttft_s is None and s.decode_s is None for s in whole.steps)
    for traj in (streamed, whole):  # what the server reports, either way
        assert [s.cached_tokens for s in traj.steps] == [11, None, None, 40]
        assert [s.queue_s for s in traj.steps] == [0.25, None, None, None]
        assert traj.counters.queue_s == 0.25
        assert abs(traj.counters.generation_s + 0.25 - traj.counters.llm_s) < 1e-9
        assert [s.request_attempts for s in traj.steps] == [1, 1, 1, 1]
    row = streamed.steps[0].to_row("r", "k", 1)
    assert (row.ttft_s, row.queue_s, row.request_attempts) == (streamed.steps[0].ttft_s, 0.25, 1)


async def test_a_server_that_ignores_stream_is_read_whole(sandbox, policy, llm_for):
    # raw_body is sent as application/json even to a stream=true request
    body = {"model": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"},
                                       "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}}
    srv = policy([{"raw_body": json.dumps(body)}])
    sb, task = sandbox
    traj = await run_agent(task, sb, llm_for(srv, stream=True), agent_cfg(), session_id="s")
    assert (traj.exit_reason, traj.final_message) == ("agent", "whole")
    assert traj.steps[0].ttft_s is None  # not streamed, so no first-token time is claimed


def test_interleaved_tool_call_pieces_fold_by_index():
    """Pieces of parallel calls may interleave (one index, then another, then the first again)."""
    whole = {"model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "reasoning": "r1r2",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}},
            {"id": "b", "type": "function", "function": {"name": "Read", "arguments": '{"file_path": "/x"}'}}],
    }}], "usage": {"prompt_tokens": 5, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 4}}}

    def delta(d, finish=None):
        return {"model": "m", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}

    chunks = [
        delta({"role": "assistant", "content": ""}),
        delta({"reasoning": "r1"}), delta({"reasoning": "r2"}),
        delta({"tool_calls": [{"index": 0, "id": "a", "type": "function",
                               "function": {"name": "Bash", "arguments": ""}}]}),
        delta({"tool_calls": [{"index": 1, "id": "b", "type": "function", "function": {"name": "Read"}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"command": '}}]}),
        delta({"tool_calls": [{"index": 1, "function": {"arguments": '{"file_path": "/x"}'}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '"ls"}'}}]}),
        delta({}, "tool_calls"),
        {"model": "m", "choices": [], "usage": whole["usage"]},
    ]
    asm = StreamAssembler()
    produced = [asm.feed(c) for c in chunks]
    assert produced == [False, True, True, True, True, True, True, True, False, False]
    a = parse_completion(asm.completion(), keep_reasoning=True)
    b = parse_completion(whole, keep_reasoning=True)
    assert dataclasses.asdict(a) == dataclasses.asdict(b)
    assert a.usage.cached_tokens == 4 and [c["id"] for c in a.tool_calls] == ["a", "b"]


def test_the_policy_servers_chunks_fold_back_to_its_completion():
    completion = {"id": "x", "created": 1, "model": "scripted", "object": "chat.completion",
                  "choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": "a longer answer", "reasoning": "why"}}],
                  "usage": {"prompt_tokens": 2}, "metrics": {"queue_time_ms": 5}}
    asm = StreamAssembler()
    for c in stream_chunks(completion, include_usage=True):
        asm.feed(c)
    folded = parse_completion(asm.completion(), keep_reasoning=True)
    assert dataclasses.asdict(folded) == dataclasses.asdict(parse_completion(completion, keep_reasoning=True))
    assert folded.queue_s == 0.005
    empty = StreamAssembler()
    assert empty.completion() == {"choices": []}  # no chunk at all: parse_completion says malformed
