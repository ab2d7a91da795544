import json
import os
import struct

import pytest

from dgxspark_vllm_standin import progress, safetensors_io


def test_model_dir_layout(model_dir):
    config = json.load(open(os.path.join(model_dir, "config.json")))
    for key in ("architectures", "num_attention_heads", "num_key_value_heads", "head_dim", "num_hidden_layers",
                "max_position_embeddings", "torch_dtype"):
        assert key in config
    shards, weight_map = safetensors_io.list_shards(model_dir)
    assert [os.path.basename(s) for s in shards] == ["model-%05d-of-00004.safetensors" % i for i in range(1, 5)]
    assert set(weight_map.values()) == {os.path.basename(s) for s in shards}


def test_headers_parse_and_cover_the_data(model_dir):
    shards, weight_map = safetensors_io.list_shards(model_dir)
    seen = set()
    for shard in shards:
        info = safetensors_io.read_header(shard)
        assert info["used_bytes"] == info["data_size"]
        assert safetensors_io.read_data(shard, info) == info["data_size"]
        seen |= set(info["tensors"])
        with open(shard, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
        assert length == info["header_length"]
    assert seen == set(weight_map)


def test_without_index_lists_sorted_files(model_dir):
    os.remove(os.path.join(model_dir, "model.safetensors.index.json"))
    shards, weight_map = safetensors_io.list_shards(model_dir)
    assert len(shards) == 4 and weight_map is None


@pytest.mark.parametrize("damage,match", [
    (lambda raw: raw[:4], "shorter than the 8-byte header"),
    (lambda raw: struct.pack("<Q", 10 ** 9) + raw[8:], "does not fit"),
    (lambda raw: raw[:8] + b"x" + raw[9:], "not valid JSON"),
])
def test_damaged_headers_are_reported(tmp_path, damage, match):
    path = tmp_path / "x.safetensors"
    safetensors_io.write_shard(str(path), {"a": ("F32", [2, 2], b"\0" * 16)})
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(safetensors_io.SafetensorsError, match=match):
        safetensors_io.read_header(str(path))


def test_size_mismatch_is_reported(tmp_path):
    path = tmp_path / "x.safetensors"
    safetensors_io.write_shard(str(path), {"a": ("F32", [2, 2], b"\0" * 12)})
    with pytest.raises(safetensors_io.SafetensorsError, match="needs 16 bytes"):
        safetensors_io.read_header(str(path))


def test_missing_shard_in_index(model_dir):
    os.remove(os.path.join(model_dir, "model-00002-of-00004.safetensors"))
    with pytest.raises(safetensors_io.SafetensorsError, match="missing: model-00002-of-00004"):
        safetensors_io.list_shards(model_dir)


@pytest.mark.parametrize("done,total,elapsed,expected", [
    (0, 4, 0.0, "Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]"),
    (1, 4, 2.0, "Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:02<00:06,  2.00s/it]"),
    (4, 4, 2.0, "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:02<00:00,  2.00it/s]"),
    (57, 96, 3725.0, "Loading safetensors checkpoint shards:  59% Completed | 57/96 [1:02:05<42:28, 65.35s/it]"),
])
def test_progress_line_format(done, total, elapsed, expected):
    assert progress.format_line(done, total, elapsed) == expected
