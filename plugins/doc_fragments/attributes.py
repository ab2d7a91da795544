# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared attribute documentation for dgxspark.cluster modules."""

from __future__ import annotations


class ModuleDocFragment:
    """Attributes that describe how a module behaves in check and diff mode."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
"""

    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: The module only reads, so check mode runs it unchanged.
  diff_mode:
    support: none
    details: The module changes nothing, so there is nothing to diff.
"""

    POSIX = r"""
options: {}
attributes:
  platform:
    description: Target operating system/family that can be operated against.
    support: full
    platforms: posix
"""
