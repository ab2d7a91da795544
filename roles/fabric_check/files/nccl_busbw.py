# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NCCL bus bandwidth over all nodes, run by the fabric_check role inside the serving image (python3 -, one rank per node).

Every rank prints the NCCL libraries it mapped (`# NCCL library: <sha256> <path>`) and, with NCCL_DEBUG=VERSION in its
environment (the role sets it), NCCL's own version line: the fabric report compares the builds across nodes.
torch.distributed with the NCCL backend; env: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, FABRIC_CHECK_COLLECTIVE
(all_gather | all_reduce), FABRIC_CHECK_MAX_BYTES. Sizes from max/8 to max, doubling. Prints rank 0's table in the
format of nccl-tests (size = bytes of the gathered/reduced buffer; busbw = algbw x (n-1)/n for all_gather and
x 2(n-1)/n for all_reduce, as nccl-tests' doc/PERFORMANCE.md defines), ending with "# Avg bus bandwidth : X",
so the same parser reads this and real nccl-tests output.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist


def loaded_nccl():
    """(sha256, path) of every libnccl this process mapped (/proc/self/maps): the build NCCL runs, whatever its version
    says (the pip wheel's and the system's can report the same one)."""
    import hashlib  # pylint: disable=import-outside-toplevel
    with open('/proc/self/maps') as handle:
        paths = sorted(set(line.split()[-1] for line in handle if 'libnccl' in line and line.split()[-1].startswith('/')))
    found = []
    for path in paths:
        digest = hashlib.sha256()
        with open(path, 'rb') as library:
            for block in iter(lambda: library.read(1 << 20), b''):
                digest.update(block)
        found.append((digest.hexdigest(), path))
    return found


def main():
    collective = os.environ.get('FABRIC_CHECK_COLLECTIVE', 'all_gather')
    max_bytes = int(os.environ['FABRIC_CHECK_MAX_BYTES'])
    dist.init_process_group('nccl')
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    factor = (world - 1) / world * (2 if collective == 'all_reduce' else 1)
    sizes = []
    size = max(max_bytes // 8, 1 << 20)
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    if rank == 0:
        print('# Collective test starting: %s_perf (torch.distributed, fabric_check)' % collective)
        print('#       size         count      type   redop    root     time   algbw   busbw  #wrong')
    busbws = []
    for size in sizes:
        count = size // 4 // world * world
        out = torch.ones(count, dtype=torch.float32, device='cuda')
        inp = torch.ones(count // world, dtype=torch.float32, device='cuda')

        def run(out=out, inp=inp):
            if collective == 'all_reduce':
                dist.all_reduce(out)
            else:
                dist.all_gather_into_tensor(out, inp)

        for dummy in range(5):
            run()
        torch.cuda.synchronize()
        dist.barrier()
        if size == sizes[0]:  # NCCL is loaded and initialised now: say which build, on every rank
            for digest, path in loaded_nccl():
                print('# NCCL library: %s %s' % (digest, path))
            sys.stdout.flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        iters = 20
        start.record()
        for dummy in range(iters):
            run()
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1000.0 / iters
        algbw = count * 4 / seconds / 1e9
        busbw = algbw * factor
        busbws.append(busbw)
        if rank == 0:
            print('%12d  %12d  %8s  %6s  %6d  %7.1f  %6.2f  %6.2f  %6s' % (
                count * 4, count, 'float', 'sum' if collective == 'all_reduce' else 'none', -1, seconds * 1e6, algbw, busbw, 'N/A'))
        del out, inp
        torch.cuda.empty_cache()
    if rank == 0:
        print('# Avg bus bandwidth    : %g ' % (sum(busbws) / len(busbws)))
        print('#')
        print('# Collective test concluded: %s_perf' % collective)
    dist.destroy_process_group()
    return 0


if __name__ == '__main__':
    sys.exit(main())
