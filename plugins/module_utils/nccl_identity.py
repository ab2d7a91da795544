# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which NCCL each node's ranks loaded, and whether it is the same build everywhere (the fabric check's NCCL test).

Two builds can report the same version: the pip wheel's libnccl (nvidia-nccl-cu*) and the system's (libnccl2). One
wedged after 20-26 min under 4-way load while the other passed a 60-minute soak (vllm #42354, #41725). A process can
even map both, and then the first one loaded answers (an H200 machine with torch's wheel 2.28.9 and the system's
2.28.3, LD_PRELOAD'ed: NCCL said 2.28.3 while torch.cuda.nccl.version() said 2.28.9). So the check reads NCCL's own
version line (NCCL_DEBUG=VERSION: `NCCL version 2.28.9+cuda13.0`; INFO: the same after `host:pid:tid [dev] NCCL INFO `) and the
libraries the rank mapped, each with its sha256 (the test prints `# NCCL library: <sha256> <path>` from
/proc/self/maps), and compares them across nodes.
"""

from __future__ import annotations

import hashlib
import os
import re

from ansible_collections.dgxspark.cluster.plugins.module_utils.proc_files import process_ids, read_process_file

# NCCL_DEBUG=INFO prefixes it (`host:pid:tid [dev] NCCL INFO NCCL version ...`), NCCL_DEBUG=VERSION prints it bare.
_VERSION = re.compile(r'(?:^|NCCL INFO )NCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?', re.M)
_LIBRARY = re.compile(r'^# NCCL library: ([0-9a-f]{64}) (/\S+)\s*$', re.M)
CAUSE_NCCL_BUILD = 'NCCL build'


def parse_rank_output(text):
    """{'version': '2.28.9+cuda13.0' or None, 'libraries': [(sha256, path)]} from one rank's output."""
    versions = ['%s+cuda%s' % found if found[1] else found[0] for found in _VERSION.findall(text or '')]
    return {'version': versions[0] if versions else None,
            'libraries': sorted(set(_LIBRARY.findall(text or '')), key=lambda item: item[1])}


def _build(identity):
    return tuple(sha for sha, _path in identity['libraries'])


def _describe(identity):
    libraries = ', '.join('%s (sha256 %s)' % (path, sha[:12]) for sha, path in identity['libraries']) or 'no library seen'
    # The engine's processes show only the files they mapped; the fabric test's ranks print NCCL's version too.
    return 'NCCL %sfrom %s' % (identity['version'] + ' ' if identity['version'] else '', libraries)


def failures(outputs, order):
    """(summary line or None, failures) from each node's rank output ({host: text}; a node without output is left out).
    A failure: two libraries in one rank, or nodes whose builds differ (the same version with another sha256 too)."""
    found = dict((host, parse_rank_output(outputs[host])) for host in order if outputs.get(host))
    return compare_builds(found, order)


def compare_builds(found, order, subject="the NCCL test's rank"):
    """(summary line or None, failures) from each node's identity ({host: {'version', 'libraries'}}): the fabric test's
    ranks (failures) or the serving engine's processes (loaded_by_processes)."""
    found = dict((host, identity) for host, identity in found.items() if identity['libraries'] or identity['version'])
    if not found:
        return None, []
    problems = []
    for host, identity in found.items():
        if len(identity['libraries']) > 1:
            problems.append({'host': host, 'rail': None, 'interface': None, 'peer': None, 'cause': CAUSE_NCCL_BUILD,
                             'detail': '%s mapped %d NCCL libraries (%s); the first one loaded answers, '
                                       'whichever it is. Keep one: the image\'s own (unset LD_PRELOAD and '
                                       'LD_LIBRARY_PATH entries that name another libnccl), or mount the host\'s in its '
                                       'place.' % (subject, len(identity['libraries']), _describe(identity))})
    builds = {}
    for host, identity in found.items():
        builds.setdefault((identity['version'], _build(identity)), []).append(host)
    if len(builds) > 1:
        versions = set(version for version, _build_key in builds)
        same = len(versions) == 1
        detail = '; '.join('%s on %s' % (_describe(found[hosts[0]]), ', '.join(hosts)) for _key, hosts in
                           sorted(builds.items(), key=lambda item: order.index(item[1][0])))
        problems.append({'host': ','.join(h for h in order if h in found), 'rail': None, 'interface': None, 'peer': None,
                         'cause': CAUSE_NCCL_BUILD,
                         'detail': '%s: %s. Serve one NCCL build on every node: the same serving image (by ID) '
                                   'everywhere, and no host library mounted on some nodes only.' % (
                                       'the nodes loaded different NCCL files (another path, or the same path with '
                                       'other contents: the pip wheel\'s and the system\'s differ, vllm #42354)'
                                       if None in versions else
                                       'the nodes run the same NCCL version from different builds (the pip wheel\'s '
                                       'and the system\'s differ: one wedged under load, vllm #42354)' if same else
                                       'the nodes run different NCCL versions', detail)})
    first = found[next(h for h in order if h in found)]
    line = ('NCCL build: %s on %d node(s)' % (_describe(first), len(found)) if len(builds) == 1 and not problems
            else 'NCCL build: differs between nodes or within one (see failures)')
    return line, problems


def mapped_libraries(maps_text):
    """The libnccl files a process mapped, from its /proc/PID/maps (`address perms offset dev inode path`); a file
    replaced since it was loaded keeps its path with ` (deleted)` after it."""
    paths = set()
    for line in (maps_text or '').splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6:
            continue  # anonymous memory has no path
        path = fields[5].strip()
        if path.endswith(' (deleted)'):
            path = path[:-len(' (deleted)')]
        if path.startswith('/') and path.rsplit('/', 1)[-1].startswith('libnccl'):
            paths.add(path)
    return sorted(paths)


def container_pids(container_ids, proc='/proc'):
    """{container id: [pid]} of the host's processes whose cgroup names one of the containers (Docker's cgroup paths
    hold the full container id under both cgroup drivers: `docker-<id>.scope` and `/docker/<id>`)."""
    found = dict((cid, []) for cid in container_ids)
    for entry in process_ids(proc):
        cgroup = read_process_file(os.path.join(proc, str(entry), 'cgroup'))
        for cid in container_ids:
            if cgroup and cid in cgroup:
                found[cid].append(entry)
    return found


def loaded_by_processes(pids, proc='/proc', digest=None):
    """{'version': None, 'libraries': [(sha256, path)], 'processes': n} of the libnccl files the processes mapped: the
    file is read through the process' own root (/proc/PID/root), so a path inside a container names its file."""
    digest = digest or _sha256
    libraries = set()
    mapping = 0
    for pid in pids:
        paths = mapped_libraries(read_process_file(os.path.join(proc, str(pid), 'maps')))
        for path in paths:
            sha = digest(os.path.join(proc, str(pid), 'root', path.lstrip('/')))
            if sha:
                libraries.add((sha, path))
        mapping += 1 if paths else 0
    return {'version': None, 'libraries': sorted(libraries, key=lambda item: (item[1], item[0])), 'processes': mapping}


def _sha256(path):
    try:
        with open(path, 'rb') as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except (IOError, OSError):
        return None
