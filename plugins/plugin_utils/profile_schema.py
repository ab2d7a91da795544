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

import difflib
import hashlib
import os
import re

_NUMBER = (int, float)

# The fields of a model profile (profiles/models/<name>.yml): name, accepted types, required, meaning.
# docs/profiles.md documents each of them (a unit test keeps the two in step).
PROFILE_FIELDS = (
    ('hf_repo', str, True, 'Hugging Face repository id: what `vllm serve` gets and the served name by default'),
    ('total_params_b', _NUMBER, True, 'total parameters, in billions'),
    ('active_params_b', _NUMBER, True, 'parameters read per token (MoE: the active experts), in billions; the decode roofline'),
    ('weight_size_gb', _NUMBER, True, 'size of the checkpoint on disk, GB (10^9 bytes); the memory fit and the disk check'),
    ('is_moe', bool, True, 'mixture of experts'),
    ('num_attention_heads', int, True, 'query heads; TP must divide it'),
    ('num_key_value_heads', int, True, 'KV heads; the KV cache size per token'),
    ('head_dim', int, True, 'dimension of one head'),
    ('num_hidden_layers', int, True, 'decoder layers'),
    ('kv_cache_layers', int, True, 'layers that keep a KV cache (hybrid models: the full-attention ones)'),
    ('max_position_embeddings', int, True, 'the longest context the model supports'),
    ('default_max_model_len', int, True, 'max_model_len when the inventory sets none'),
    ('default_kv_cache_dtype', str, True, 'kv_cache_dtype when the inventory sets none (auto, fp8, ...)'),
    ('kv_cache_auto_dtype_bytes', int, True, 'bytes per KV element when kv_cache_dtype is auto (bf16: 2)'),
    ('sources', dict, True, 'where every figure comes from: field -> source'),
    ('description', str, False, 'one line for people'),
    ('published', bool, False, 'false when the checkpoint is not (yet) on Hugging Face'),
    ('quantization', str, False, 'how the weights are quantized (for people; vLLM reads the checkpoint)'),
    ('moe_weight_dtype', str, False, 'dtype of the expert weights'),
    ('num_experts', int, False, 'routed experts'),
    ('num_experts_per_tok', int, False, 'experts per token'),
    ('hidden_size', int, False, 'model width'),
    ('full_attention_interval', int, False, 'hybrid models: one full-attention layer every N'),
    ('replicated_weight_gb', _NUMBER, False, 'GB every rank holds in full (not sharded by TP x PP)'),
    ('bytes_per_param', _NUMBER, False, 'bytes per parameter for the roofline (default weight_size_gb / total_params_b)'),
    ('runtime_overhead_gib', _NUMBER, False, 'per-node memory besides weights and KV cache, GiB (default: the inventory\'s)'),
    ('revision', str, False, 'the commit of hf_repo (40 hex digits) that is served by default; required with '
                             'vllm_options.trust_remote_code'),
    ('vllm_options', dict, False, 'vLLM options of this model: option name -> value (dgxspark.cluster.vllm_args)'),
    ('patches', list, False, 'files mounted into the serving containers and applied at start (below)'),
    ('vllm_checked_against', str, False, 'the vLLM source or version the options were checked against'),
    ('flag_checks', list, False, 'each questionable flag of the sources: flag, verdict, source'),
    ('notes', list, False, 'what users of this model should know'),
)

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


def _type_name(types):
    if types == _NUMBER:
        return 'a number'
    return {'str': 'a string', 'int': 'an integer', 'bool': 'true or false', 'dict': 'a mapping', 'list': 'a list'}[types.__name__]


def _is_type(value, types):
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types)


def validate_profile_fields(profile_name, profile):
    """Every problem of a profile's fields: missing, wrong type, not positive, unknown (with the closest known name)."""
    where = 'model profile %s' % profile_name
    if not isinstance(profile, dict):
        return ['%s is not a mapping; fix the profile file.' % where]
    problems = []
    known = [field[0] for field in PROFILE_FIELDS]
    for name, types, required, _doc in PROFILE_FIELDS:
        if name not in profile or profile[name] is None:
            if required:
                problems.append('%s: field %s is missing (%s); fix the profile file.' % (where, name, _type_name(types)))
            continue
        value = profile[name]
        if not _is_type(value, types):
            problems.append('%s: field %s must be %s (got %r); fix the profile file.' % (where, name, _type_name(types), value))
        elif types in (int, _NUMBER) and value <= 0 and name != 'replicated_weight_gb':
            problems.append('%s: field %s must be positive (got %r); fix the profile file.' % (where, name, value))
        elif name == 'replicated_weight_gb' and value < 0:
            problems.append('%s: field replicated_weight_gb must not be negative (got %r); fix the profile file.' % (where, value))
    for name in sorted(key for key in profile if not str(key).startswith('_') and key not in known):
        close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
        problems.append('%s: unknown field %s%s; fix the profile file (docs/profiles.md lists the fields).' % (
            where, name, ' (did you mean %s?)' % close[0] if close else ''))
    return problems


def plan_patches(profile):
    """The patches of a valid profile as the plan carries them: each entry plus its file's path on the controller."""
    return carried_patches(profile.get('patches'), profile.get('_dir', '.'), 'profile %s' % profile.get('_name', ''))


def carried_patches(entries, base_dir, origin):
    """Valid patch entries as the plan carries them: name, node path, the file's path on the controller, and where the
    entry was declared (a profile, or the inventory's dgxspark_site_patches)."""
    patches = []
    for entry in entries or []:
        patch = dict(entry, name=os.path.basename(str(entry['file'])), origin=origin,
                     source=os.path.abspath(os.path.join(base_dir, str(entry['file']))))
        patch['node_path'] = patch_node_path(patch)
        patches.append(patch)
    return patches


# The inventory's own patches (a site's, or the virtual lab's changes to vLLM's CPU build), applied before a profile's.
SITE_PATCHES = 'dgxspark_site_patches'


def site_patches(entries, base_dir, profile_patches):
    """(patches, problems): the inventory's dgxspark_site_patches (files under base_dir, the inventory's
    dgxspark_site_patches_dir), carried like a profile's and placed before them; a name both use is a problem."""
    profile_patches = list(profile_patches or [])
    if not entries:
        return profile_patches, []
    if not base_dir:
        return profile_patches, ['%s needs dgxspark_site_patches_dir, the directory its files are relative to' % SITE_PATCHES]
    problems = validate_patches(None, entries, base_dir, where=SITE_PATCHES)
    if problems:
        return profile_patches, problems
    patches = carried_patches(entries, base_dir, SITE_PATCHES)
    taken = set(p['name'] for p in profile_patches or [])
    for patch in patches:
        if patch['name'] in taken:
            problems.append('%s: %s is also a patch of the model profile (they share one directory on the nodes): rename '
                            'one' % (SITE_PATCHES, patch['name']))
    return patches + profile_patches, problems


def validate_patches(profile_name, patches, base_dir, where=None):
    """Every problem of a profile's patches list; files resolved under base_dir and sha256-checked."""
    where = where or 'profile %s: patches' % profile_name
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
    entries = [e for e in patches if isinstance(e, dict)]
    names = [os.path.basename(str(e['file'])) for e in entries if e.get('file')]
    for name in sorted(set(n for n in names if names.count(n) > 1)):
        problems.append('%s: two patches named %s (they share one directory on the nodes): rename one' % (where, name))
    return problems


def version_problems(profile_name, patches, image_version):
    """A refusal line per patch whose vllm range excludes the image's vLLM version."""
    problems = []
    for entry in patches or []:
        if not version_in_range(image_version, entry['vllm']):
            problems.append('%s: patch %s applies to vLLM %s, but the image has vLLM %s; '
                            'refusing to start it' % (entry.get('origin') or 'profile %s' % profile_name, entry['file'],
                                                      entry['vllm'], image_version))
    return problems


# Where the serving containers see the node's patch directory, and the start scripts' helper in it.
PATCH_MOUNT = '/opt/dgxspark/patches'
PATCH_APPLY_SCRIPT = 'dgxspark-apply-patches.sh'
# Python imports one sitecustomize module: the collection's loader (site/, on PYTHONPATH) runs every sitecustomize patch.
SITE_LOADER = 'site/sitecustomize.py'


def patch_node_path(entry):
    """Where a plan patch lives under the node's patch directory: a sitecustomize in sitecustomize/ (run by the loader)."""
    return 'sitecustomize/' + entry['name'] if entry['kind'] == 'sitecustomize' else entry['name']


def patch_node_files(patches, base_dir=''):
    """Every file a node's patch directory holds for the plan's patches, in order: the patches, the start scripts' helper
    when there is any patch, the sitecustomize loader when there is a sitecustomize patch. Joined to base_dir when given;
    anything else found in the directory is left from an earlier plan."""
    files = [p['node_path'] for p in patches or []]
    if files:
        files.append(PATCH_APPLY_SCRIPT)
    if any(p['kind'] == 'sitecustomize' for p in patches or []):
        files.append(SITE_LOADER)
    return [os.path.join(base_dir, path) for path in files] if base_dir else files


def patch_container_env(patches, mount=PATCH_MOUNT):
    """The serving containers' environment for the plan's patches: what the start scripts verify and apply, and
    PYTHONPATH for a sitecustomize. Empty without patches (the containers stay as they were)."""
    if not patches:
        return {}
    env = {
        'DGXSPARK_PATCH_DIR': mount,
        # kind:path-under-the-directory:sha256, in the profile's order; the start scripts check each sha256 before use.
        'DGXSPARK_PATCHES': ' '.join('%s:%s:%s' % (p['kind'], p['node_path'], p['sha256']) for p in patches),
    }
    if any(p['kind'] == 'sitecustomize' for p in patches):
        env['PYTHONPATH'] = mount + '/' + os.path.dirname(SITE_LOADER)
    return env
