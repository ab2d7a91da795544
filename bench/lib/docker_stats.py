"""`docker stats --no-stream --format '{{json .}}'` output (a JSON object per line) -> CPU % and memory MiB by container."""
import json
import re

# Docker prints memory in binary units (go-units' BytesSize: B, KiB, MiB, GiB, TiB).
_UNITS = {"B": 1.0 / 2 ** 20, "KiB": 1.0 / 1024, "MiB": 1.0, "GiB": 1024.0, "TiB": 1024.0 ** 2}


def mebibytes(text):
    """'1.234GiB' -> 1263.6; ValueError for anything else."""
    match = re.match(r"^\s*([0-9.]+)\s*([KMGT]?i?B)\s*$", text)
    if not match or match.group(2) not in _UNITS:
        raise ValueError("not a memory size of docker stats: %r" % text)
    return float(match.group(1)) * _UNITS[match.group(2)]


def node_usage(output):
    """{container name: (cpu percent, memory used MiB)} of one node's `docker stats` lines."""
    usage = {}
    for line in output.splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        used = row["MemUsage"].split("/")[0]
        usage[row["Name"]] = (float(row["CPUPerc"].rstrip("%")), mebibytes(used))
    return usage
