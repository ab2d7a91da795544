# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a small state file only root reads (phase stamps, the firewall's record): 0600 from its creation, in a 0700
directory, replaced atomically so that a reader never sees half of it. Raises OSError."""

from __future__ import annotations

import os


def write_private_file(path, text):
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = path + '.tmp'
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 'w') as handle:
        handle.write(text)
    os.rename(tmp, path)
