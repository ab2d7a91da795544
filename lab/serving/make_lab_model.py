#!/usr/bin/env python3
"""Write the lab's model: a tiny Qwen3-MoE that vLLM's own engine serves, made here with no download.

Random weights (seeded: the same bytes on every run of the same library versions), saved by
transformers in several safetensors shards (so a load prints `Loading safetensors checkpoint
shards: k/n` lines), and a byte-level BPE tokenizer trained here on a fixed local text, with
Qwen's chat template and special tokens (`<|im_end|>` ends a turn; `<think>` and `<tool_call>`
exist for the profiles' reasoning and tool parsers).

Sized for the seeds' options on the CPU build: 4 attention heads (TP 4 divides them), head_dim 32
(the CPU attention backend needs >= 32), max_position_embeddings 262144 (every profile's
max_model_len fits), 4 layers (PP up to 4).

Runs with the lab engine's Python (torch, transformers and tokenizers come with vLLM):
    ENGINE/bin/python3 lab/serving/make_lab_model.py DIR [--shards 4]
"""
import argparse
import json
import os

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"]
VOCAB_SIZE = 1536


def corpus():
    """A fixed local text: Python's own Zen and a few of its module docstrings (no download)."""
    import codecs  # pylint: disable=import-outside-toplevel
    import collections  # pylint: disable=import-outside-toplevel
    import contextlib  # pylint: disable=import-outside-toplevel
    import io  # pylint: disable=import-outside-toplevel
    import json as json_module  # pylint: disable=import-outside-toplevel
    import string  # pylint: disable=import-outside-toplevel
    with contextlib.redirect_stdout(io.StringIO()):  # importing `this` prints the Zen
        import this  # pylint: disable=import-outside-toplevel
    zen = codecs.decode(this.s, "rot13")
    lines = [zen, collections.__doc__ or "", json_module.__doc__ or "", string.__doc__ or ""]
    lines += ["The DGX Spark cluster serves the model across %d nodes." % n for n in range(1, 9)]
    return [line for text in lines for line in text.splitlines() if line.strip()]


def make_tokenizer(model_dir):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # pylint: disable=import-outside-toplevel
    from transformers import PreTrainedTokenizerFast  # pylint: disable=import-outside-toplevel
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE - len(SPECIAL_TOKENS), special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=SPECIAL_TOKENS[1:])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(model_dir)
    return fast


def make_model(model_dir, shards, name):
    import torch  # pylint: disable=import-outside-toplevel
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM  # pylint: disable=import-outside-toplevel
    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, moe_intermediate_size=128,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1, max_position_embeddings=262144,
        tie_word_embeddings=False, torch_dtype="bfloat16", bos_token_id=None, eos_token_id=None)
    model = Qwen3MoeForCausalLM(config).to(torch.bfloat16)
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    # transformers splits between tensors: raise the shard limit until exactly `shards` files come out.
    limit_kb = total // shards // 1000
    while True:
        model.save_pretrained(model_dir, safe_serialization=True, max_shard_size="%dKB" % limit_kb)
        written = [f for f in os.listdir(model_dir) if f.endswith(".safetensors")]
        if len(written) <= shards:
            break
        for name in written + ["model.safetensors.index.json"]:
            os.unlink(os.path.join(model_dir, name))
        limit_kb = limit_kb * 21 // 20 + 1
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as handle:
        saved = json.load(handle)
    saved["_name_or_path"] = name
    with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(saved, handle, indent=2, sort_keys=True)
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("model_dir")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--name", default="dgxspark-lab/qwen3-moe-tiny")
    opts = ap.parse_args()
    os.makedirs(opts.model_dir, exist_ok=True)
    tokenizer = make_tokenizer(opts.model_dir)
    total = make_model(opts.model_dir, opts.shards, opts.name)
    files = sorted(f for f in os.listdir(opts.model_dir) if f.endswith(".safetensors"))
    for name in os.listdir(opts.model_dir):  # transformers writes shards 0600: the lab's model is world-readable like a cache
        os.chmod(os.path.join(opts.model_dir, name), 0o644)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    with open(os.path.join(opts.model_dir, "generation_config.json"), "w", encoding="utf-8") as handle:
        json.dump({"eos_token_id": eos, "pad_token_id": tokenizer.pad_token_id}, handle, indent=2)
    print("%s: %d weight bytes in %d shards, tokenizer of %d tokens" % (opts.model_dir, total, len(files), len(tokenizer)))


if __name__ == "__main__":
    main()
