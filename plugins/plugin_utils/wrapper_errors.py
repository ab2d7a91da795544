# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one error shape of the collection's thin wrappers (filters and action plugins): ``<plugin>: <message>``.

The logic below a wrapper (plugin_utils, module_utils) raises ``ValueError`` subclasses with a complete message; a wrong
input type surfaces as ``KeyError``, ``TypeError``, ``IndexError`` or ``AttributeError``. The wrapper names itself in
front of that message and raises Ansible's error of its kind: a filter ``AnsibleFilterError``, an action
``AnsibleActionFail`` (the task fails with it as ``msg``).
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail, AnsibleFilterError

INPUT_ERRORS = (ValueError, KeyError, TypeError, IndexError, AttributeError)


def _call(error_class, name, function, args, kwargs):
    try:
        return function(*args, **kwargs)
    except INPUT_ERRORS as exc:
        raise error_class('%s: %s' % (name, exc)) from exc


def filter_call(name, function, *args, **kwargs):
    """``function(*args, **kwargs)``; an input error becomes ``AnsibleFilterError('<name>: <message>')``."""
    return _call(AnsibleFilterError, name, function, args, kwargs)


def action_call(name, function, *args, **kwargs):
    """``function(*args, **kwargs)``; an input error becomes ``AnsibleActionFail('<name>: <message>')``."""
    return _call(AnsibleActionFail, name, function, args, kwargs)
