"""Build a tiny random Qwen2-architecture model locally (no hub): weights, config and a tokenizer.

The tokenizer is a byte-level BPE trained here on a fixed synthetic corpus, with Qwen2.5-Coder's
FIM and file tokens as special tokens (appended after the learned vocabulary), so sparkls' Qwen
FIM prompt renders and tokenizes as it would for the real model. The weights are random (seeded)
and do all the work of a real forward pass; `output` picks what greedy decoding writes:
- "constant" (the default): the final norm's weight is zero, so every logit is 0 and greedy decoding always
  picks token id 0, an ordinary character: the same character until `max_tokens`, never a stop. Lengths are
  deterministic, abort and priority tests get long generations, and a constrained first token (healing) is
  the lowest allowed id.
- "cycle": the next token is a function of the last one: each printable ASCII character's token is followed
  by the next one's (`~` by `!`), every other token by `!`; all other logits are 0. The text varies along the
  generation, so a lost or repeated token shows in it (resume and speculation tests compare text), and it
  never stops on its own either. The attention and MLP outputs are zeroed (their work is still done), and the
  embeddings are one-hot, so the last token alone decides.

Used by the vLLM tests and `benchmarks/engine_bench.py`: `build(dest)` writes a checkpoint dir
that vLLM (or transformers) loads, and returns its path. Sizes are parameters so the benchmark can
build a model whose prefill is long enough to measure.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL = [
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<|im_start|>",
    "<|im_end|>",
]
ROOT = Path(__file__).resolve().parents[1]


def _corpus() -> list[str]:
    """Fixed synthetic Python (the tokenizer, hence the model, must not change when sources do)."""
    lines = []
    for i in range(400):
        lines.append(
            f'def helper_{i}(x, y={i}):\n    """Return x times {i}."""\n    if x > {i}:\n'
            f"        return x * {i} + y\n    for item in range({i}):\n        print(item, x)\n"
            f"    return None\n\n\nclass Thing{i}:\n    def __init__(self):\n        self.value = {i}\n"
        )
    return lines


def cycle_ids(tok) -> list[int]:
    """The "cycle" model's tokens in the order it writes them: one per printable ASCII character, `!` first."""
    return [tok.convert_tokens_to_ids(chr(i)) for i in range(33, 127)]  # byte-level: "!".."~" are themselves


def _cycle(model, ids: list[int], hidden: int) -> None:
    """Weights for `output="cycle"`: the residual stream is the token's one-hot embedding (dimension k for the
    k-th cycle token, dimension n for every other token), and the output head maps dimension k to token k + 1."""
    import torch

    n = len(ids)
    assert hidden > n, f"the cycle needs hidden > {n}"
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    emb = model.model.embed_tokens.weight
    emb.zero_()
    emb[:, n] = 1.0
    head = model.lm_head.weight
    head.zero_()
    for k, t in enumerate(ids):
        emb[t, n] = 0.0
        emb[t, k] = 1.0
        head[ids[(k + 1) % n], k] = 10.0
    head[ids[0], n] = 10.0
    model.model.norm.weight.copy_(torch.ones(hidden))


def build(
    dest: Path,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 256,
    vocab: int = 2048,
    max_positions: int = 8192,
    seed: int = 0,
    output: str = "constant",
) -> Path:
    """Write the model to `dest` (skipped when a complete one with the same shape is already there)."""
    shape = {
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "kv_heads": kv_heads,
        "output": output,
        "intermediate": intermediate,
        "vocab": vocab,
        "max_positions": max_positions,
        "seed": seed,
    }
    stamp = dest / "sparkls-tiny.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == shape:
        return dest
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    dest.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab - len(SPECIAL), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(_corpus(), trainer)
    tok.add_special_tokens(SPECIAL)  # after the learned vocabulary: id 0 is an ordinary character
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL[1:],
    )
    fast.save_pretrained(dest)
    eos = fast.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=eos,
        eos_token_id=eos,
        torch_dtype="float32",
        rope_theta=10000.0,
        use_sliding_window=False,
    )
    if output == "cycle":
        config.tie_word_embeddings = False
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        if output == "constant":
            model.model.norm.weight.zero_()  # all logits 0: greedy decoding always picks token id 0
        elif output == "cycle":
            _cycle(model, cycle_ids(fast), hidden)
        else:
            raise ValueError(f"unknown output {output!r}")
    model.save_pretrained(dest, safe_serialization=True)
    stamp.write_text(json.dumps(shape))
    return dest


if __name__ == "__main__":
    import sys

    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sparkls-tiny")))
