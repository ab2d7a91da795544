# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Redaction for diagnostics bundles (playbooks/diagnose.yml, the node_diagnostics module): every secret the collection
knows, by value (the contents of its secret files) and by shape (a bearer header, an --api-key argument, a Hugging Face
token, a variable whose name says it holds a secret), replaced before anything leaves the node.

Pure logic, stdlib only; table-tested in tests/unit/test_diagnostics.py.
"""

from __future__ import annotations

import re

# Environment variables whose value is a secret whatever it looks like.
SECRET_NAME = re.compile(r'(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|PRIVATE_KEY|CREDENTIAL|_KEY$)', re.IGNORECASE)
# Variables that tell how the serving processes talk (the NCCL/Gloo/UCX/vLLM/Ray environment of a container).
SERVING_ENV = re.compile(r'^(NCCL_|GLOO_|UCX_|VLLM_|RAY_|TORCH_|CUDA_|NVIDIA_|HF_|OMP_|PYTORCH_|TRITON_|MASTER_|'
                         r'DGXSPARK_|LD_LIBRARY_PATH|PYTHONPATH)')
_SHAPES = (
    (re.compile(r'(Authorization:\s*Bearer\s+)(?!<redacted)[^\s"\']+', re.IGNORECASE), r'\1<redacted>'),
    (re.compile(r'(--api-key[= ]\s*)(?!<redacted)[^\s"\']+'), r'\1<redacted>'),
    (re.compile(r'\bhf_[A-Za-z0-9]{20,}\b'), '<redacted:hf-token>'),
    (re.compile(r'-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----', re.DOTALL),
     '<redacted:private-key>'),
)
# A secret shorter than this is not looked for by value (it would match ordinary text); its shape still is.
MIN_SECRET_LENGTH = 8


def secret_values(named):
    """{name: content} of secret files -> [(value, name)], longest first (a secret inside another is replaced after it),
    each value also without its trailing newline; empty and short values left out."""
    values = []
    for name, content in sorted((named or {}).items()):
        for value in set([content or '', (content or '').strip()]):
            if len(value.strip()) >= MIN_SECRET_LENGTH:
                values.append((value, name))
    return sorted(values, key=lambda item: (-len(item[0]), item[1]))


def redact(text, secrets):
    """text with every known secret value and every secret-shaped string replaced. secrets: secret_values(...)."""
    for value, name in secrets:
        text = text.replace(value, '<redacted:%s>' % name)
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    return text


def redact_env(env, secrets):
    """Docker's Config.Env (['NAME=value', ...]) -> the serving variables only, sorted, each secret value redacted."""
    lines = []
    for item in env or []:
        name, _sep, value = item.partition('=')
        if not SERVING_ENV.match(name):
            continue
        if SECRET_NAME.search(name) and not name.endswith(('_FILE', '_PATH')):
            value = '<redacted>'
        lines.append('%s=%s' % (name, redact(value, secrets)))
    return sorted(lines)


def tail(text, lines):
    """The last `lines` lines of text."""
    kept = (text or '').splitlines()[-lines:] if lines > 0 else []
    return '\n'.join(kept) + ('\n' if kept else '')
