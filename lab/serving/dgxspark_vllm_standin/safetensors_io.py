"""Read and write the safetensors format with the standard library only (LAB STAND-IN).

File layout: 8-byte little-endian header length N, N bytes of JSON header
({tensor name: {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__"}),
then the tensor data; offsets are relative to the end of the header.
"""
import json
import os
import struct

DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
MAX_HEADER = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    pass


def read_header(path):
    """Parse and check one shard's header. Returns a dict with tensors, data size, file size."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        raw = handle.read(8)
        if len(raw) != 8:
            raise SafetensorsError("%s: shorter than the 8-byte header length" % path)
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER or 8 + length > size:
            raise SafetensorsError("%s: header length %d does not fit a file of %d bytes" % (path, length, size))
        try:
            header = json.loads(handle.read(length).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise SafetensorsError("%s: header is not valid JSON: %s" % (path, err)) from err
    if not isinstance(header, dict):
        raise SafetensorsError("%s: header is not a JSON object" % path)
    metadata = header.pop("__metadata__", None)
    data_size = size - 8 - length
    end_max = 0
    for name, info in header.items():
        try:
            begin, end = info["data_offsets"]
            dtype, shape = info["dtype"], info["shape"]
        except (KeyError, TypeError, ValueError) as err:
            raise SafetensorsError("%s: tensor %s: malformed entry %r" % (path, name, info)) from err
        count = 1
        for dim in shape:
            count *= dim
        if dtype in DTYPE_SIZES and end - begin != count * DTYPE_SIZES[dtype]:
            raise SafetensorsError("%s: tensor %s: %s%s needs %d bytes, offsets give %d"
                                   % (path, name, dtype, shape, count * DTYPE_SIZES[dtype], end - begin))
        if not 0 <= begin <= end <= data_size:
            raise SafetensorsError("%s: tensor %s: offsets [%d, %d] outside data of %d bytes"
                                   % (path, name, begin, end, data_size))
        end_max = max(end_max, end)
    return {"path": path, "tensors": header, "metadata": metadata, "header_length": length,
            "data_size": data_size, "file_size": size, "used_bytes": end_max}


def read_data(path, header_info, chunk=1 << 20):
    """Read a shard's tensor bytes (as a loader would). Returns the number of bytes read."""
    total = 0
    with open(path, "rb") as handle:
        handle.seek(8 + header_info["header_length"])
        while True:
            block = handle.read(chunk)
            if not block:
                break
            total += len(block)
    return total


def list_shards(model_dir):
    """Shards in load order: from model.safetensors.index.json's weight_map if present, else *.safetensors sorted."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as handle:
            weight_map = json.load(handle).get("weight_map") or {}
        names = sorted(set(weight_map.values()))
        missing = [n for n in names if not os.path.exists(os.path.join(model_dir, n))]
        if missing:
            raise SafetensorsError("%s lists shards that are missing: %s" % (index, ", ".join(missing)))
        return [os.path.join(model_dir, n) for n in names], weight_map
    names = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    return [os.path.join(model_dir, n) for n in names], None


def write_shard(path, tensors, metadata=None):
    """Write tensors {name: (dtype, shape, bytes)} as a safetensors file."""
    header = {}
    offset = 0
    blobs = []
    for name in sorted(tensors):
        dtype, shape, blob = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * ((8 - len(raw) % 8) % 8)  # align data like the reference writer
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        for blob in blobs:
            handle.write(blob)
