# -*- coding: utf-8 -*-
# Copyright: (c) 2026, dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Validation of a model profile's ``patches`` list (declarative, versioned, verified "mods").

A patch entry names a file kept next to the profiles, its sha256, how it is applied and the vLLM
version range it was written for::

    patches:
      - file: patches/cudnn_off_sitecustomize.py
        sha256: <64 hex digits>
        kind: sitecustomize        # or: python (run with python3 before vllm)
        vllm: ">=0.33,<0.34"
        reason: why the model needs it

Every function returns the list of every problem found (never stops at the first), like
inventory_schema. The plan refuses the profile before any host is contacted.
"""
from __future__ import annotations

import hashlib
import os
import re

PATCH_KINDS = ('sitecustomize', 'python')
PATCH_KEYS = ('file', 'sha256', 'kind', 'vllm', 'reason')
_SHA256 = re.compile(r'^[0-9a-f]{64}$')
_CLAUSE = re.compile(r'^\s*(>=|<=|==|!=|>|<)\s*([0-9]+(?:\.[0-9]+)*)\s*$')
_VERSION = re.compile(r'^v?([0-9]+(?:\.[0-9]+)*)')


def parse_version(text):
    """'0.33.0rc1+cu130' -> (0, 33, 0); None when no leading number."""
    match = _VERSION.match(str(text).strip())
    if not match:
        return None
    return tuple(int(part) for part in match.group(1).split('.'))


def _cmp(left, right):
    width = max(len(left), len(right))
    left = left + (0,) * (width - len(left))
    right = right + (0,) * (width - len(right))
    return (left > right) - (left < right)


def parse_range(spec):
    """'>=0.33,<0.34' -> [('>=', (0, 33)), ('<', (0, 34))]; raises ValueError naming the bad clause."""
    clauses = []
    for clause in str(spec).split(','):
        match = _CLAUSE.match(clause)
        if not match:
            raise ValueError('bad version clause %r (use e.g. ">=0.33,<0.34")' % clause.strip())
        clauses.append((match.group(1), parse_version(match.group(2))))
    return clauses


_TESTS = {
    '>=': lambda c: c >= 0, '<=': lambda c: c <= 0, '==': lambda c: c == 0,
    '!=': lambda c: c != 0, '>': lambda c: c > 0, '<': lambda c: c < 0,
}


def version_in_range(version, spec):
    """True when the version text satisfies every clause of spec."""
    parsed = parse_version(version)
    if parsed is None:
        raise ValueError('cannot read a vLLM version from %r' % version)
    return all(_TESTS[op](_cmp(parsed, bound)) for op, bound in parse_range(spec))


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for block in iter(lambda: handle.read(65536), b''):
            digest.update(block)
    return digest.hexdigest()


def validate_patches(profile_name, patches, base_dir):
    """Every problem of a profile's patches list; files resolved under base_dir and sha256-checked."""
    where = 'profile %s: patches' % profile_name
    if patches is None:
        return []
    if not isinstance(patches, list):
        return ['%s must be a list of entries, got %s' % (where, type(patches).__name__)]
    problems = []
    for index, entry in enumerate(patches):
        at = '%s[%d]' % (where, index)
        if not isinstance(entry, dict):
            problems.append('%s must be a mapping with keys %s' % (at, ', '.join(PATCH_KEYS)))
            continue
        for key in sorted(set(entry) - set(PATCH_KEYS)):
            problems.append('%s: unknown key %r (known: %s)' % (at, key, ', '.join(PATCH_KEYS)))
        for key in PATCH_KEYS:
            if not entry.get(key):
                problems.append('%s: %s is required' % (at, key))
        kind = entry.get('kind')
        if kind and kind not in PATCH_KINDS:
            problems.append('%s: kind %r is not one of %s' % (at, kind, ', '.join(PATCH_KINDS)))
        if entry.get('vllm'):
            try:
                parse_range(entry['vllm'])
            except ValueError as exc:
                problems.append('%s: vllm: %s' % (at, exc))
        sha = str(entry.get('sha256') or '')
        if sha and not _SHA256.match(sha):
            problems.append('%s: sha256 must be 64 lowercase hex digits' % at)
        name = entry.get('file')
        if not name:
            continue
        if os.path.isabs(str(name)) or '..' in str(name).split('/'):
            problems.append('%s: file %r must be relative to the profile directory, without ..' % (at, name))
            continue
        path = os.path.join(base_dir, str(name))
        if not os.path.isfile(path):
            problems.append('%s: file %s not found' % (at, path))
        elif sha and _SHA256.match(sha):
            actual = file_sha256(path)
            if actual != sha:
                problems.append('%s: sha256 mismatch for %s: profile says %s, file is %s'
                                % (at, name, sha, actual))
    return problems


def version_problems(profile_name, patches, image_version):
    """A refusal line per patch whose vllm range excludes the image's vLLM version."""
    problems = []
    for entry in patches or []:
        if not version_in_range(image_version, entry['vllm']):
            problems.append('profile %s: patch %s applies to vLLM %s, but the image has vLLM %s; '
                            'refusing to start it' % (profile_name, entry['file'], entry['vllm'], image_version))
    return problems
