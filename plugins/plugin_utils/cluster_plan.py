# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build the cluster plan of a multi-node vLLM deployment on DGX Spark, or explain every problem.

Pure logic: no host is contacted. Inputs are the inventory groups (``head``, ``workers``), the
variables of every host, the known model profiles and a playbook's presets. Output is a plan
(nodes, ranks, rail addresses, parallelism, memory fit, KV-cache room, decode roofline) or a
``ClusterPlanError`` listing ALL problems, each naming the variable (and host) and the fix.

Units: weights and bandwidth use GB = 1e9 bytes (as model cards and bandwidth figures do);
node memory, budgets, overhead and KV room use GiB = 2**30 bytes (as MemTotal and vLLM report).

Memory model (per node; one GPU per Spark, so node = GPU = one TP x PP rank):
  weights/node = (weight_size - replicated) / (TP x PP) + replicated
    assumption: every weight (MoE experts, dense and attention layers) is sharded evenly over the
    TP x PP ranks; a profile may name ``replicated_weight_gb`` that every rank holds in full.
  budget       = gpu_memory_utilization x node_memory_gib
  KV room      = budget - weights/node - runtime overhead
  KV bytes/token/node = 2 (K and V) x kv_heads_per_gpu x head_dim x kv_layers_per_pp_stage x dtype bytes
    kv_heads_per_gpu = max(1, kv_heads / TP) (vLLM replicates KV heads when TP > kv_heads);
    kv_layers_per_pp_stage = ceil(kv_cache_layers / PP); only full-attention layers hold KV cache
    (Qwen3.5's Gated DeltaNet layers keep a fixed-size recurrent state per sequence, ignored here).
Decode roofline (single stream, upper bound):
  tok/s = bandwidth / (active weight bytes / TP)
    active weight bytes = active params x bytes per param (weight_size / total params).
    PP does not speed up single-stream decode: the stages run one after another for every token,
    so the per-token time is the sum over stages, which equals reading all active weights / TP.
"""

from __future__ import annotations

import math

from ansible_collections.dgxspark.cluster.plugins.plugin_utils.role_inputs import REVIEWED_COMMIT as COMMIT
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.role_networks import interface_name_problem
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.profile_schema import (
    plan_patches,
    validate_patches,
    validate_profile_fields,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.inventory_schema import (
    DEFAULT_FROM_PROFILE,
    DEFAULT_NODE_COUNT,
    DEFAULT_RUNTIME_OVERHEAD_GIB,
    GPU_MEMORY_UTILIZATION_CEILING,
    check_value,
    cluster_variable_names,
    get_variable,
    validate_cluster_vars,
    validate_host_vars,
)

try:
    import netaddr
except ImportError as exc:  # pragma: no cover - exercised only without netaddr
    netaddr = None
    HAS_NETADDR = False
    NETADDR_IMPORT_ERROR = exc
else:
    HAS_NETADDR = True
    NETADDR_IMPORT_ERROR = None

GB = 1000 ** 3
GIB = 1024 ** 3
KV_DTYPE_BYTES = {'fp8': 1}
# What each executor backend runs where (the plan table's line).
EXECUTOR_LAYOUTS = {
    'ray': 'ray (a Ray container on every node; vLLM on the head, --distributed-executor-backend ray)',
    'mp': "mp (vLLM's own multi-node backend: vLLM on every node, rank 0 serving the API, the others --headless)",
}


class ClusterPlanError(ValueError):
    """The inventory does not describe a valid cluster; ``problems`` lists every reason."""

    def __init__(self, problems, notes=None):
        self.problems = list(problems)
        # What the reader needs beside the problems (the user's values kept over a playbook's presets).
        self.notes = list(notes or [])
        super(ClusterPlanError, self).__init__('\n'.join(self.problems))


def _num(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate_profile(name, profile):
    """Every problem of a loaded model profile (a mapping from profiles/models/<name>.yml), patches included."""
    problems = validate_profile_fields(name, profile)
    if not isinstance(profile, dict):
        return problems
    if not problems and profile['kv_cache_layers'] > profile['num_hidden_layers']:
        problems.append('model profile %s: kv_cache_layers %d exceeds num_hidden_layers %d; fix the profile file.' % (
            name, profile['kv_cache_layers'], profile['num_hidden_layers']))
    if 'revision' in profile and not (isinstance(profile['revision'], str) and COMMIT.match(profile['revision'])):
        problems.append('model profile %s: revision %r is not a commit (40 lowercase hex digits); a profile pins what it '
                        'was checked against, never a branch or tag: fix the profile file.' % (name, profile['revision']))
    if isinstance(profile.get('patches', []), list):
        problems.extend(validate_patches(name, profile.get('patches'), profile.get('_dir', '.')))
    return problems


def _group_problems(groups):
    """Node order and the problems of the head/workers groups."""
    problems = []
    heads = list(groups.get('head') or [])
    workers = list(groups.get('workers') or [])
    if not heads:
        problems.append("Inventory group 'head' is missing or empty: put exactly one host (the Ray head, where vLLM serves) in group head "
                        "(no inventory at all? give yours with -i, e.g. -i inventories/4node).")
    elif len(heads) > 1:
        problems.append("Inventory group 'head' has %d hosts (%s): exactly one host must be the head; move the others to group workers." % (
            len(heads), ', '.join(heads)))
    for host in heads:
        if host in workers:
            problems.append("Host %s is in both group head and group workers: remove it from workers." % host)
    seen = set()
    for host in heads + workers:
        if host in seen and not (host in heads and host in workers):
            problems.append('Host %s is listed twice in groups head/workers: list each node once.' % host)
        seen.add(host)
    order = []
    for host in heads[:1] + workers:
        if host not in order:
            order.append(host)
    return order, problems


def _collect_cluster_values(order, hostvars):
    """Cluster-wide variables as the head sees them; a problem for each one that differs between nodes."""
    problems = []
    values = {}
    for name in cluster_variable_names():
        seen = dict((h, (hostvars.get(h) or {})[name]) for h in order if name in (hostvars.get(h) or {}))
        if not seen:
            continue
        reference = order[0] if order[0] in seen else [h for h in order if h in seen][0]
        values[name] = seen[reference]
        others = ['%s has %r' % (h, seen[h]) for h in order if h in seen and seen[h] != values[name]]
        others += ['%s does not set it' % h for h in order if h not in seen]
        if others:
            problems.append('%s must be the same on every node (set it in group_vars/all, not in host_vars): %s has %r, but %s.' % (
                name, reference, values[name], ', '.join(others)))
    return values, problems


def apply_presets(raw_values, presets, presets_by):
    """A playbook's presets (deploy-397b.yml: the model and its shape) where the user set nothing.

    ``raw_values``: the cluster variables as the inventory or -e set them; ``presets``: name -> value, as the playbook
    ``presets_by`` states them. A value the user set is honoured over the preset and reported (never replaced without a
    word), except the model profile, which is what the playbook deploys: a different one is refused. Returns
    (raw values with the presets in, report, problems); report: {'by', 'applied': {name: value}, 'kept': [{name,
    yours, preset}]}.
    """
    names = cluster_variable_names()
    problems = [('%s presets %s, which is not a cluster variable: fix the playbook (known: %s).' % (
        presets_by, name, ', '.join(names))) for name in presets if name not in names]
    merged = dict(raw_values)
    report = {'by': presets_by, 'applied': {}, 'kept': []}
    for name in [n for n in presets if n in names]:
        preset, preset_problems = check_value(name, get_variable(name), presets[name])
        if preset_problems:
            problems.extend('%s presets a wrong value: %s' % (presets_by, p) for p in preset_problems)
            continue
        if raw_values.get(name) is None:
            merged[name] = preset
            report['applied'][name] = preset
            continue
        yours, wrong = check_value(name, get_variable(name), raw_values[name])
        if wrong or yours == preset:
            continue  # a wrong value of the user's is refused by its own check; an equal one needs no word
        if name == 'dgxspark_model_profile':
            problems.append('%s deploys the model profile %s, but the inventory (or -e) sets dgxspark_model_profile to %s: '
                            'run playbooks/deploy.yml to serve %s, or remove dgxspark_model_profile to serve %s.' % (
                                presets_by, preset, yours, yours, preset))
        else:
            report['kept'].append({'name': name, 'yours': yours, 'preset': preset})
    return merged, report, problems


def preset_lines(report):
    """The plan table's lines about a playbook's presets: what it set, and which of the user's values beat it."""
    if not report or not (report['applied'] or report['kept']):
        return []
    lines = []
    if report['applied']:
        lines.append('Preset by %s (the inventory does not set them): %s' % (report['by'], ', '.join(
            '%s=%s' % (name, _shown(value)) for name, value in sorted(report['applied'].items()))))
    if report['kept']:
        lines.append('Yours over the presets of %s (inventory or -e): %s' % (report['by'], ', '.join(
            '%s=%s (preset %s)' % (k['name'], _shown(k['yours']), _shown(k['preset'])) for k in report['kept'])))
    return lines


def _shown(value):
    """A value as a user writes it in YAML (true, not True)."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    return str(value)


def _parse_subnet(where, subnet):
    """Return (IPNetwork or None, [problems])."""
    text = str(subnet).strip()
    if '/' not in text:
        return None, ['%s is %r, a bare address: give the rail network with its prefix length, e.g. 192.168.100.0/24.' % (where, subnet)]
    try:
        net = netaddr.IPNetwork(text)
    except (netaddr.AddrFormatError, ValueError, TypeError) as exc:
        return None, ['%s is %r, not a valid IPv4 network (%s): use CIDR form, e.g. 192.168.100.0/24.' % (where, subnet, exc)]
    if net.version != 4:
        return None, ['%s is %r, an IPv6 network: rails use static IPv4 subnets, e.g. 192.168.100.0/24.' % (where, subnet)]
    problems = []
    if net.ip != net.network:
        problems.append('%s is %r, which has host bits set: use the network address %s.' % (where, subnet, net.cidr))
    if net.prefixlen > 30:
        problems.append('%s is %r: a /%d leaves no room for node addresses; use a /24 (or at most /30).' % (where, subnet, net.prefixlen))
    if net.cidr in netaddr.IPNetwork('169.254.0.0/16') or netaddr.IPNetwork('169.254.0.0/16') in net.cidr:
        problems.append('%s is %r, link-local: link-local rails caused NCCL ibv_modify_qp errors; use a private static subnet such as 192.168.100.0/24.' % (
            where, subnet))
    return net.cidr, problems


def _rail_problems(rails):
    """Parsed rails (name -> dict with 'net') and problems: duplicates and overlapping subnets."""
    problems = []
    parsed = []
    names = {}
    interfaces = {}
    for index, rail in enumerate(rails):
        where = 'dgxspark_rails[%d] (%s)' % (index, rail.get('name'))
        if rail['name'] in names:
            problems.append('dgxspark_rails: rail name %s is used by entries %d and %d; give every rail its own name.' % (
                rail['name'], names[rail['name']], index))
        names.setdefault(rail['name'], index)
        if rail['interface'] in interfaces:
            problems.append('dgxspark_rails: interface %s is used by rails %s and %s; each rail is one CX-7 netdev (twin).' % (
                rail['interface'], interfaces[rail['interface']], rail['name']))
        interfaces.setdefault(rail['interface'], rail['name'])
        interface_problem = interface_name_problem(where + '.interface', rail['interface'])
        if interface_problem:
            problems.append(interface_problem + '.')
        net, subnet_problems = _parse_subnet(where + '.subnet', rail['subnet'])
        problems.extend(subnet_problems)
        item = dict(rail)
        item['net'] = net
        parsed.append(item)
    for i, first in enumerate(parsed):
        for second in parsed[i + 1:]:
            if first['net'] is None or second['net'] is None:
                continue
            if first['net'] == second['net']:
                problems.append('dgxspark_rails: rails %s and %s share the subnet %s; give each rail (CX-7 twin) its own subnet, '
                                'e.g. 192.168.100.0/24 and 192.168.101.0/24 (same-subnet twins cause routing ambiguity and NCCL hangs).' % (
                                    first['name'], second['name'], first['net']))
            elif first['net'] in second['net'] or second['net'] in first['net']:
                problems.append('dgxspark_rails: the subnets of rails %s (%s) and %s (%s) overlap; use disjoint subnets, one per rail.' % (
                    first['name'], first['net'], second['name'], second['net']))
    return parsed, problems


def _address_problems(order, rails, host_resolved, address_base=0):
    """Per node and rail addresses; problems for bad, out-of-subnet or duplicate addresses. ``address_base``: the nodes
    of the fleet's serving groups planned before this one, so that every node of the fleet gets its own address."""
    problems = []
    addresses = dict((host, {}) for host in order)
    rail_names = set(r['name'] for r in rails)
    for host in order:
        given = host_resolved.get(host, {}).get('dgxspark_rail_addresses') or {}
        for rail_name in sorted(set(given) - rail_names):
            problems.append('dgxspark_rail_addresses (host %s) names rail %s, which is not in dgxspark_rails (%s); use one of those names.' % (
                host, rail_name, ', '.join(sorted(rail_names))))
    for rail in rails:
        net = rail['net']
        if net is None:
            continue
        used = {}
        for rank, host in enumerate(order):
            given = (host_resolved.get(host, {}).get('dgxspark_rail_addresses') or {}).get(rail['name'])
            if given is not None:
                where = 'dgxspark_rail_addresses[%s] (host %s)' % (rail['name'], host)
                if '/' in given:
                    problems.append('%s is %r: give the address without prefix length (the prefix comes from the rail subnet %s).' % (
                        where, given, net))
                    continue
                try:
                    address = netaddr.IPAddress(given)
                except (netaddr.AddrFormatError, ValueError, TypeError):
                    problems.append('%s is %r, not a valid IPv4 address: give e.g. %s.' % (where, given, net.network + 10 + rank))
                    continue
                fix = 'pick a free host address inside %s' % net
            else:
                where = 'dgxspark_rails[%s].address_offset (host %s, rank %d)' % (rail['name'], host, rank)
                try:
                    address = net.network + rail['address_offset'] + address_base + rank
                except (IndexError, ValueError, netaddr.AddrFormatError):
                    address = None
                fix = 'lower address_offset of rail %s or use a larger subnet' % rail['name']
                if address is None or address not in net:
                    problems.append('%s: network %s + offset %d + rank %d%s falls outside the rail subnet %s; %s.' % (
                        where, net.network, rail['address_offset'], rank,
                        ' + %d nodes of the serving groups before' % address_base if address_base else '', net, fix))
                    continue
            if address not in net:
                problems.append('%s: %s is outside the rail subnet %s; %s.' % (where, address, net, fix))
                continue
            if net.size > 2 and address == net.network:
                problems.append('%s: %s is the network address of %s; %s.' % (where, address, net, fix))
                continue
            if net.size > 2 and address == net.broadcast:
                problems.append('%s: %s is the broadcast address of %s; %s.' % (where, address, net, fix))
                continue
            if address in used:
                problems.append('Rail %s: address %s is given to both %s and %s; every node needs its own address '
                                '(check dgxspark_rail_addresses of both hosts).' % (rail['name'], address, used[address], host))
                continue
            used[address] = host
            addresses[host][rail['name']] = str(address)
    return addresses, problems


def _resolve_with_profile(values, profile, node_count):
    resolved = dict(values)
    if resolved.get('dgxspark_tensor_parallel_size') == DEFAULT_NODE_COUNT:
        pp = resolved.get('dgxspark_pipeline_parallel_size')
        resolved['dgxspark_tensor_parallel_size'] = max(1, node_count // pp) if isinstance(pp, int) and pp > 0 else node_count
    for name, field in (('dgxspark_max_model_len', 'default_max_model_len'), ('dgxspark_kv_cache_dtype', 'default_kv_cache_dtype')):
        if resolved.get(name) == DEFAULT_FROM_PROFILE:
            resolved[name] = profile.get(field) if profile else None
    if resolved.get('dgxspark_model_revision') == DEFAULT_FROM_PROFILE:
        resolved['dgxspark_model_revision'] = (profile.get('revision') or 'main') if profile else None
    if resolved.get('dgxspark_runtime_overhead_gib') == DEFAULT_FROM_PROFILE:
        overhead = profile.get('runtime_overhead_gib') if profile else None
        resolved['dgxspark_runtime_overhead_gib'] = float(overhead) if _num(overhead) else DEFAULT_RUNTIME_OVERHEAD_GIB
    return resolved


def kv_bytes_per_token(profile, tp, pp, kv_cache_dtype):
    """KV-cache bytes one token takes on one node (see the module docstring)."""
    kv_heads = profile['num_key_value_heads']
    kv_heads_per_gpu = max(1, kv_heads // tp)
    layers_per_stage = int(math.ceil(float(profile['kv_cache_layers']) / pp))
    dtype_bytes = KV_DTYPE_BYTES.get(kv_cache_dtype, profile['kv_cache_auto_dtype_bytes'])
    return {
        'bytes_per_token': 2 * kv_heads_per_gpu * profile['head_dim'] * layers_per_stage * dtype_bytes,
        'kv_heads_per_gpu': kv_heads_per_gpu,
        'kv_layers_per_pp_stage': layers_per_stage,
        'dtype_bytes': dtype_bytes,
    }


def bytes_per_param(profile):
    """Effective bytes per parameter of the checkpoint (weight size / total parameters)."""
    if _num(profile.get('bytes_per_param')):
        return float(profile['bytes_per_param'])
    return float(profile['weight_size_gb']) / float(profile['total_params_b'])


def decode_roofline_tok_s(profile, tp, bandwidth_gbs):
    """Single-stream decode upper bound: bandwidth / (active weight bytes / TP); PP does not help."""
    active_gb = float(profile['active_params_b']) * bytes_per_param(profile)
    return bandwidth_gbs / (active_gb / tp), active_gb


def _parallel_problems(values, profile, node_count, hosts_where='groups head/workers'):
    problems = []
    tp = values.get('dgxspark_tensor_parallel_size')
    pp = values.get('dgxspark_pipeline_parallel_size')
    if not (isinstance(tp, int) and isinstance(pp, int)):
        return problems
    if node_count and tp * pp != node_count:
        heads = profile['num_attention_heads'] if profile else node_count
        kv_heads = profile['num_key_value_heads'] if profile else node_count
        valid_tp = [d for d in range(node_count, 0, -1)
                    if node_count % d == 0 and heads % d == 0 and (kv_heads % d == 0 or d % kv_heads == 0)]
        example = 'TP=%d, PP=%d' % (valid_tp[0], node_count // valid_tp[0]) if valid_tp else 'TP=1, PP=%d' % node_count
        problems.append('dgxspark_tensor_parallel_size x dgxspark_pipeline_parallel_size = %d x %d = %d GPUs, but the inventory has %d nodes '
                        'and a DGX Spark has exactly one GPU (%d nodes = %d GPUs): choose TP x PP = %d (e.g. %s) or change the '
                        'number of hosts in %s.' % (tp, pp, tp * pp, node_count, node_count, node_count, node_count, example, hosts_where))
    if profile:
        heads = profile['num_attention_heads']
        if heads % tp:
            divisors = [d for d in range(1, node_count + 1) if heads % d == 0 and node_count % d == 0]
            problems.append('dgxspark_tensor_parallel_size=%d does not divide the %d attention heads of profile %s: use a TP that divides %d '
                            '(with %d nodes: %s) and put the rest in dgxspark_pipeline_parallel_size.' % (
                                tp, heads, profile.get('_name'), heads, node_count, ', '.join(str(d) for d in divisors) or 'none'))
        kv_heads = profile['num_key_value_heads']
        if kv_heads % tp and tp % kv_heads:
            problems.append('dgxspark_tensor_parallel_size=%d and the %d KV heads of profile %s: vLLM needs TP to divide the KV heads or '
                            'the KV heads to divide TP; pick another TP.' % (tp, kv_heads, profile.get('_name')))
        if pp > profile['num_hidden_layers']:
            problems.append('dgxspark_pipeline_parallel_size=%d exceeds the %d layers of profile %s; lower it.' % (
                pp, profile['num_hidden_layers'], profile.get('_name')))
    return problems


def _setting_problems(values, profile):
    problems = []
    util = values.get('dgxspark_gpu_memory_utilization')
    allow = values.get('dgxspark_allow_gpu_memory_utilization_above_ceiling')
    if isinstance(util, float) and util > GPU_MEMORY_UTILIZATION_CEILING and not allow:
        problems.append('dgxspark_gpu_memory_utilization is %s, above the unified-memory ceiling %.2f (the OS, Ray and RoCE buffers share the '
                        'same memory; 0.92+ fails at start for several users): set it to %.2f or lower, or set '
                        'dgxspark_allow_gpu_memory_utilization_above_ceiling: true to accept the risk.' % (
                            util, GPU_MEMORY_UTILIZATION_CEILING, GPU_MEMORY_UTILIZATION_CEILING))
    if profile:
        max_len = values.get('dgxspark_max_model_len')
        if isinstance(max_len, int) and max_len > profile['max_position_embeddings']:
            problems.append('dgxspark_max_model_len=%d exceeds the %d tokens profile %s supports (max_position_embeddings): set it to %d or less.' % (
                max_len, profile['max_position_embeddings'], profile.get('_name'), profile['max_position_embeddings']))
        if values.get('dgxspark_enable_expert_parallel') and profile.get('is_moe') and str(profile.get('moe_weight_dtype')) == 'fp8' \
                and not values.get('dgxspark_allow_expert_parallel_with_fp8_moe'):
            problems.append('dgxspark_enable_expert_parallel is true but profile %s has FP8 MoE weights: vLLM hit a fatal dimension error with '
                            'FP8 MoE and --enable-expert-parallel (seed 000); set dgxspark_enable_expert_parallel: false (TP shards the experts), '
                            'or set dgxspark_allow_expert_parallel_with_fp8_moe: true after testing your vLLM version.' % profile.get('_name'))
        if values.get('dgxspark_enable_expert_parallel') and not profile.get('is_moe'):
            problems.append('dgxspark_enable_expert_parallel is true but profile %s is not a MoE model: set it to false.' % profile.get('_name'))
    return problems


def _revision_problems(values, profile):
    """A profile that runs its repository's Python (trust_remote_code) is served only from a reviewed commit."""
    revision = values.get('dgxspark_model_revision')
    if not profile or not (profile.get('vllm_options') or {}).get('trust_remote_code') or not isinstance(revision, str):
        return []
    if COMMIT.match(revision):
        return []
    return ['dgxspark_model_revision is %r, but profile %s sets trust_remote_code: vLLM runs the Python files of %s as root in '
            'every serving container, so a branch or tag would run whatever is pushed there next. Review the repository\'s '
            'code at one commit and set dgxspark_model_revision to that commit (40 hex digits, from '
            'https://huggingface.co/%s/commits/main), or give the profile a revision.' % (
                revision, profile.get('_name'), profile['hf_repo'], profile['hf_repo'])]


def _memory(values, profile, tp, pp):
    """Memory fit, KV room, roofline; returns (dict, problems)."""
    problems = []
    world = tp * pp
    total_gb = float(profile['weight_size_gb'])
    replicated_gb = float(profile.get('replicated_weight_gb') or 0.0)
    weights_node_gb = (total_gb - replicated_gb) / world + replicated_gb
    weights_node_gib = weights_node_gb * GB / GIB
    util = values['dgxspark_gpu_memory_utilization']
    node_gib = values['dgxspark_node_memory_gib']
    overhead_gib = values['dgxspark_runtime_overhead_gib']
    budget_gib = util * node_gib
    room_gib = budget_gib - weights_node_gib - overhead_gib
    kv = kv_bytes_per_token(profile, tp, pp, values['dgxspark_kv_cache_dtype'])
    kv_tokens = int(room_gib * GIB // kv['bytes_per_token']) if room_gib > 0 else 0
    max_len = values['dgxspark_max_model_len']
    name = profile.get('_name')
    if room_gib <= 0:
        need_util = (weights_node_gib + overhead_gib) / node_gib
        usable_gib = budget_gib - overhead_gib - replicated_gb * GB / GIB
        min_nodes = int(math.ceil((total_gb - replicated_gb) * GB / GIB / usable_gib)) if usable_gib > 0 else 0
        problems.append('Weights do not fit (dgxspark_model_profile, dgxspark_tensor_parallel_size x dgxspark_pipeline_parallel_size): '
                        'profile %s needs %.1f GB of weights per node (%.1f GB over TP x PP = %d x %d = %d nodes, i.e. '
                        '%.2f GiB) plus %.2f GiB runtime overhead (dgxspark_runtime_overhead_gib) = %.2f GiB, but the budget is '
                        'dgxspark_gpu_memory_utilization %.2f x dgxspark_node_memory_gib %.2f = %.2f GiB per node: use more nodes (at least %d '
                        'at this utilization) or a smaller quantization (another dgxspark_model_profile)%s.' % (
                            name, weights_node_gb, total_gb, tp, pp, world, weights_node_gib, overhead_gib, weights_node_gib + overhead_gib,
                            util, node_gib, budget_gib, min_nodes,
                            (', or raise dgxspark_gpu_memory_utilization above %.2f' % need_util) if need_util < GPU_MEMORY_UTILIZATION_CEILING
                            else ' (it would need dgxspark_gpu_memory_utilization above %.2f, beyond the %.2f ceiling)' % (
                                need_util, GPU_MEMORY_UTILIZATION_CEILING)))
    elif isinstance(max_len, int) and kv_tokens < max_len:
        problems.append('dgxspark_max_model_len=%d leaves no room for one sequence: the KV cache room per node is %.2f GiB = %d tokens at %d '
                        'bytes/token (kv_cache_dtype %s); lower dgxspark_max_model_len to %d or less, set dgxspark_kv_cache_dtype: fp8, '
                        'or add nodes.' % (max_len, room_gib, kv_tokens, kv['bytes_per_token'], values['dgxspark_kv_cache_dtype'], kv_tokens))
    roofline, active_gb = decode_roofline_tok_s(profile, tp, values['dgxspark_node_memory_bandwidth_gbs'])
    memory = {
        'weight_size_gb': round(total_gb, 3),
        'replicated_weight_gb': round(replicated_gb, 3),
        'weights_per_node_gb': round(weights_node_gb, 3),
        'weights_per_node_gib': round(weights_node_gib, 3),
        'runtime_overhead_gib': round(overhead_gib, 3),
        'node_memory_gib': round(node_gib, 3),
        'gpu_memory_utilization': util,
        'budget_gib': round(budget_gib, 3),
        'kv_room_gib': round(room_gib, 3),
        'fits': room_gib > 0,
    }
    kv_cache = {
        'dtype': values['dgxspark_kv_cache_dtype'],
        'bytes_per_token_per_node': kv['bytes_per_token'],
        'kv_heads_per_gpu': kv['kv_heads_per_gpu'],
        'kv_layers_per_pp_stage': kv['kv_layers_per_pp_stage'],
        'dtype_bytes': kv['dtype_bytes'],
        'tokens': kv_tokens,
        'max_model_len': max_len,
        'full_length_sequences': (kv_tokens // max_len) if isinstance(max_len, int) and max_len > 0 else 0,
    }
    decode = {
        'bandwidth_gbs': values['dgxspark_node_memory_bandwidth_gbs'],
        'bytes_per_param': round(bytes_per_param(profile), 4),
        'active_weight_gb': round(active_gb, 3),
        'active_weight_gb_per_node': round(active_gb / tp, 3),
        'roofline_tok_s': round(roofline, 1),
    }
    return memory, kv_cache, decode, problems


ASSUMPTIONS = (
    'One GPU per DGX Spark: node = GPU = one TP x PP rank.',
    'Weights (MoE experts, dense and attention layers) are sharded evenly over TP x PP ranks; '
    'only a profile\'s replicated_weight_gb is held in full by every rank.',
    'KV cache is held only by full-attention layers; KV heads are replicated when TP exceeds them; linear-attention state is ignored.',
    'Decode roofline = memory bandwidth / (active weight bytes / TP): an upper bound for one stream; PP does not speed it up.',
    'GB = 1e9 bytes for weights and bandwidth; GiB = 2**30 bytes for node memory, budget, overhead and KV room.',
)


def serving_kinds(backend, rank):
    """The serving containers a node of ``rank`` runs under the executor backend, in start order: with Ray, Ray's on
    every node and vLLM's engine on the head (rank 0); with mp (vLLM's own multi-node backend), vLLM's on every node,
    rank 0 with the API and the others --headless. The one place where the backend decides what runs where: every
    role, playbook and plugin reads the plan's nodes[].runs (or what the plan derives from it) instead of asking it."""
    if backend == 'mp':
        return ['vllm']
    return ['ray', 'vllm'] if rank == 0 else ['ray']


def build_plan(groups, hostvars, profiles, presets=None, presets_by='the playbook', address_base=0,
               hosts_where='groups head/workers'):
    """Build the plan. ``groups``: {'head': [...], 'workers': [...]}; ``hostvars``: host -> vars;
    ``profiles``: profile name -> loaded profile mapping; ``presets``: cluster variable -> value that the playbook
    ``presets_by`` sets where the inventory does not (apply_presets). For one serving group of a fleet (fleet_plan.py):
    ``address_base``, the number of the fleet's nodes before it (its rail addresses follow theirs), and ``hosts_where``,
    the inventory group its messages name.

    Returns the plan (a dict of plain types). Raises ClusterPlanError with every problem found.
    """
    if not HAS_NETADDR:
        raise ClusterPlanError(['The Python library netaddr is required on the controller to check rail subnets (%s): '
                                'install it (pip install netaddr) in the Python that runs Ansible.' % NETADDR_IMPORT_ERROR])
    problems = []
    order, group_problems = _group_problems(groups or {})
    problems.extend(group_problems)
    hostvars = hostvars or {}
    raw_values, value_problems = _collect_cluster_values(order, hostvars) if order else ({}, [])
    problems.extend(value_problems)
    raw_values, presets_report, preset_problems = apply_presets(raw_values, presets or {}, presets_by)
    problems.extend(preset_problems)
    values, schema_problems = validate_cluster_vars(raw_values)
    problems.extend(schema_problems)

    host_resolved = {}
    for host in order:
        resolved, host_problems = validate_host_vars(host, hostvars.get(host) or {})
        host_resolved[host] = resolved
        problems.extend(host_problems)

    profile = None
    profile_name = values.get('dgxspark_model_profile')
    if profile_name is not None:
        if profile_name not in (profiles or {}):
            problems.append('dgxspark_model_profile is %r, an unknown profile: use one of %s (files in profiles/models/), or add '
                            'profiles/models/%s.yml.' % (profile_name, ', '.join(sorted(profiles or {})) or '(none found)', profile_name))
        else:
            profile_problems = validate_profile(profile_name, profiles[profile_name])
            problems.extend(profile_problems)
            if not profile_problems:
                profile = dict(profiles[profile_name])
                profile['_name'] = profile_name

    node_count = len(order)
    values = _resolve_with_profile(values, profile, node_count)
    problems.extend(_parallel_problems(values, profile, node_count, hosts_where))
    problems.extend(_setting_problems(values, profile))
    problems.extend(_revision_problems(values, profile))

    rails = []
    addresses = dict((host, {}) for host in order)
    if values.get('dgxspark_rails'):
        rails, rail_problems = _rail_problems(values['dgxspark_rails'])
        problems.extend(rail_problems)
        addresses, address_problems = _address_problems(order, rails, host_resolved, address_base)
        problems.extend(address_problems)

    tp = values.get('dgxspark_tensor_parallel_size')
    pp = values.get('dgxspark_pipeline_parallel_size')
    memory = kv_cache = decode = None
    numeric_ok = all(values.get(n) is not None for n in (
        'dgxspark_gpu_memory_utilization', 'dgxspark_node_memory_gib', 'dgxspark_runtime_overhead_gib',
        'dgxspark_kv_cache_dtype', 'dgxspark_node_memory_bandwidth_gbs'))
    if profile and numeric_ok and isinstance(tp, int) and isinstance(pp, int) and node_count and tp * pp == node_count:
        memory, kv_cache, decode, memory_problems = _memory(values, profile, tp, pp)
        problems.extend(memory_problems)

    if problems:
        raise ClusterPlanError(problems, notes=preset_lines(presets_report))

    nodes = []
    for rank, host in enumerate(order):
        nodes.append({
            'host': str(host),
            'rank': rank,
            'role': 'head' if rank == 0 else 'worker',
            'rail_addresses': dict((r['name'], addresses[host][r['name']]) for r in rails),
            'runs': serving_kinds(values['dgxspark_executor_backend'], rank),
        })
    return {
        'model_profile': profile_name,
        'hf_repo': profile['hf_repo'],
        'model_revision': values['dgxspark_model_revision'],
        'head': nodes[0]['host'],
        'nodes': nodes,
        'world_size': node_count,
        'tensor_parallel_size': tp,
        'pipeline_parallel_size': pp,
        'gpus': tp * pp,
        'gpu_memory_utilization': values['dgxspark_gpu_memory_utilization'],
        'max_model_len': values['dgxspark_max_model_len'],
        'kv_cache_dtype': values['dgxspark_kv_cache_dtype'],
        'enable_expert_parallel': values['dgxspark_enable_expert_parallel'],
        'mtu': values['dgxspark_mtu'],
        'nccl_transport': values['dgxspark_nccl_transport'],
        'executor_backend': values['dgxspark_executor_backend'],
        # With mp, every rank meets rank 0 (the head) at its rail-1 address.
        'mp_master': ({'address': nodes[0]['rail_addresses'][rails[0]['name']], 'port': values['dgxspark_mp_master_port']}
                      if 'ray' not in nodes[0]['runs'] else None),
        'rails': [{'name': r['name'], 'interface': r['interface'], 'subnet': str(r['net']),
                   'prefixlen': r['net'].prefixlen, 'address_offset': r['address_offset']} for r in rails],
        'memory': memory,
        'kv_cache': kv_cache,
        'decode': decode,
        'vllm_options': _served_options(profile, values['dgxspark_model_revision']),
        'patches': plan_patches(profile),
        'variables': dict((k, v) for k, v in values.items()),
        'presets': presets_report,
        'assumptions': list(ASSUMPTIONS),
    }


def _served_options(profile, revision):
    """The profile's vLLM options, with --revision when the repository is served at another revision than main."""
    options = dict(profile.get('vllm_options') or {})
    if revision != 'main':
        options['revision'] = revision
    return options


def _table(header, rows):
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    lines = ['  '.join(str(c).ljust(w) for c, w in zip(header, widths)).rstrip()]
    lines.append('  '.join('-' * w for w in widths))
    for row in rows:
        lines.append('  '.join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    return lines


def render_plan_table(plan, inventory=None):
    """The plan as text lines: a node table and a summary, units labelled; first, the inventory it was made from."""
    header = ['rank', 'host', 'role'] + ['%s %s (%s)' % (r['name'], r['interface'], r['subnet']) for r in plan['rails']]
    rows = [[n['rank'], n['host'], n['role']] + [n['rail_addresses'][r['name']] for r in plan['rails']] for n in plan['nodes']]
    lines = ['Inventory: %s' % inventory] if inventory else []
    lines.append('Cluster plan: %s (%s), %d nodes' % (plan['model_profile'], plan['hf_repo'], plan['world_size']))
    lines.extend(_table(header, rows))
    mem = plan['memory']
    kv = plan['kv_cache']
    dec = plan['decode']
    lines.extend([
        'Parallelism: TP %d x PP %d = %d GPUs on %d nodes (one GPU per Spark)' % (
            plan['tensor_parallel_size'], plan['pipeline_parallel_size'], plan['gpus'], plan['world_size']),
        'Weights per node: %.1f GB (%.2f GiB) of %.1f GB total' % (mem['weights_per_node_gb'], mem['weights_per_node_gib'], mem['weight_size_gb']),
        'Runtime overhead per node: %.2f GiB' % mem['runtime_overhead_gib'],
        'Budget per node: %.2f x %.2f GiB = %.2f GiB' % (mem['gpu_memory_utilization'], mem['node_memory_gib'], mem['budget_gib']),
        'KV cache room per node: %.2f GiB = %s tokens (%d bytes/token/node, kv_cache_dtype %s)' % (
            mem['kv_room_gib'], '{:,}'.format(kv['tokens']), kv['bytes_per_token_per_node'], kv['dtype']),
        'max_model_len: %d tokens (%d full-length sequences fit)' % (kv['max_model_len'], kv['full_length_sequences']),
        'Decode roofline (one stream): %.0f GB/s / (%.2f GB active weights / TP %d) = %.1f tok/s' % (
            dec['bandwidth_gbs'], dec['active_weight_gb'], plan['tensor_parallel_size'], dec['roofline_tok_s']),
        'Network: MTU %d, NCCL transport %s' % (plan['mtu'], plan['nccl_transport']),
        'Executor: %s%s' % (EXECUTOR_LAYOUTS[plan['executor_backend']],
                            ', rendezvous %(address)s:%(port)d' % plan['mp_master'] if plan.get('mp_master') else ''),
        'Model revision: %s' % plan['model_revision'],
    ])
    lines.extend(preset_lines(plan.get('presets')))
    for patch in plan.get('patches') or []:
        lines.append('Patch applied at container start: %s (%s, vLLM %s, sha256 %s...)' % (
            patch['name'], patch['kind'], patch['vllm'], patch['sha256'][:12]))
    for warning in plan.get('warnings') or []:
        lines.append('Warning: %s' % warning)
    return lines


def variable_description(name):
    """Description of an inventory variable (used in messages and docs)."""
    spec = get_variable(name)
    return spec['description'] if spec else ''
