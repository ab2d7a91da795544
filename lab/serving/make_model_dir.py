#!/usr/bin/env python3
"""Write a lab-made model directory that stands in for downloaded weights (LAB STAND-IN).

config.json (qwen3-like fields), N safetensors shards in the real format (written with the
standard library), model.safetensors.index.json, and a generation_config.json. No real
weights: tensor bytes are deterministic filler.

    python3 lab/serving/make_model_dir.py DIR [--shards 4] [--shard-mib 1] [--layers 8]
"""
import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dgxspark_vllm_standin.safetensors_io import write_shard  # noqa: E402


def qwen3_config(layers, heads, kv_heads, head_dim, hidden, max_pos, name):
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "_name_or_path": name,
        "hidden_size": hidden,
        "intermediate_size": hidden * 3,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "num_hidden_layers": layers,
        "max_position_embeddings": max_pos,
        "vocab_size": 1024,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "dgxspark_lab_stand_in": "lab-made model directory: filler bytes, not weights",
    }


def filler(name, size):
    out = bytearray()
    seed = hashlib.sha256(name.encode()).digest()
    while len(out) < size:
        seed = hashlib.sha256(seed).digest()
        out += seed
    return bytes(out[:size])


def make(model_dir, shards=4, shard_mib=1.0, layers=8, heads=16, kv_heads=8, head_dim=64, max_pos=262144,
         name="dgxspark-lab/qwen3-standin"):
    os.makedirs(model_dir, exist_ok=True)
    hidden = heads * head_dim
    config = qwen3_config(layers, heads, kv_heads, head_dim, hidden, max_pos, name)
    with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2)
    with open(os.path.join(model_dir, "generation_config.json"), "w", encoding="utf-8") as handle:
        json.dump({"do_sample": True, "temperature": 0.6, "top_p": 0.95}, handle, indent=2)
    # layer tensors spread over the shards; each tensor BF16 [rows, hidden] sized to reach shard_mib
    per_shard_bytes = int(shard_mib * 1024 * 1024)
    layers_per_shard = [[] for _ in range(shards)]
    for layer in range(layers):
        layers_per_shard[layer * shards // layers].append(layer)
    weight_map = {}
    total = 0
    for idx in range(shards):
        fname = "model-%05d-of-%05d.safetensors" % (idx + 1, shards)
        names = []
        for layer in layers_per_shard[idx]:
            for proj in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                         "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
                names.append("model.layers.%d.%s.weight" % (layer, proj))
        if idx == 0:
            names.append("model.embed_tokens.weight")
        if idx == shards - 1:
            names += ["model.norm.weight", "lm_head.weight"]
        rows = max(1, per_shard_bytes // (len(names) * hidden * 2))
        tensors = {}
        for tname in names:
            shape = [hidden] if tname.endswith("norm.weight") else [rows, hidden]
            count = 1
            for dim in shape:
                count *= dim
            tensors[tname] = ("BF16", shape, filler(tname, count * 2))
            weight_map[tname] = fname
            total += count * 2
        write_shard(os.path.join(model_dir, fname), tensors, {"format": "pt"})
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w", encoding="utf-8") as handle:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, handle, indent=2)
    return model_dir


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--shard-mib", type=float, default=1.0)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--max-position-embeddings", type=int, default=262144)
    ap.add_argument("--name", default="dgxspark-lab/qwen3-standin")
    opts = ap.parse_args()
    if opts.shards < 1 or opts.layers < opts.shards:
        ap.error("need --shards >= 1 and --layers >= --shards")
    make(opts.model_dir, opts.shards, opts.shard_mib, opts.layers, opts.heads, opts.kv_heads, opts.head_dim,
         opts.max_position_embeddings, opts.name)
    print(opts.model_dir)


if __name__ == "__main__":
    main()
