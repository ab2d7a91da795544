# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/fleet_router/files/requirements-router.lock (issue 51, docs/fleet-router.md): the fleet router's virtual environment, every
distribution pinned, so that the wheelhouse the controller downloads is the set that was tried."""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCK = os.path.join(ROOT, 'roles/fleet_router/files/requirements-router.lock')
# A distribution name (PEP 508) and one exact version: no range, no URL, no extra, no marker, no option line.
PIN = re.compile(r'^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.+!_-]*)$')


def requirement_lines(path=LOCK):
    with open(path, encoding='utf-8') as handle:
        return [line.rstrip('\n') for line in handle if line.strip() and not line.lstrip().startswith('#')]


def pins(path=LOCK):
    return dict((PIN.match(line).group(1).lower().replace('_', '-').replace('.', '-'), PIN.match(line).group(2))
                for line in requirement_lines(path))


def test_every_line_pins_one_distribution_to_one_version():
    unpinned = [line for line in requirement_lines() if not PIN.match(line)]
    assert unpinned == []
    names = [PIN.match(line).group(1).lower().replace('_', '-').replace('.', '-') for line in requirement_lines()]
    assert len(names) == len(set(names)) > 100  # each once; the proxy's whole set, not a few top-level names


def test_it_holds_the_tried_litellm_and_the_prometheus_client_its_callback_imports():
    found = pins()
    assert found['litellm'] == '1.110.2'
    assert 'prometheus-client' in found
    # the three the proxy extra pins at versions PyPI does not have, which would make every install fail
    assert not set(found) & {'litellm-proxy', 'litellm-proxy-extras', 'litellm-enterprise'}


def test_its_header_says_how_it_was_made():
    with open(LOCK, encoding='utf-8') as handle:
        header = ''.join(line for line in handle if line.startswith('#'))
    for text in ('How it was made', 'pip freeze', 'litellm-proxy==1.110.2', 'prometheus_client', 'aarch64'):
        assert text in header, text


@pytest.mark.parametrize('line', ['litellm>=1.110', 'litellm', 'litellm==1.110.*', 'litellm[proxy]==1.110.2',
                                  '-e git+https://example/litellm', 'litellm @ https://example/l.whl',
                                  "litellm==1.110.2 ; python_version >= '3.10'"])
def test_a_loose_line_is_found(line, tmp_path):
    path = tmp_path / 'lock'
    path.write_text('# header\n\nanyio==4.16.0\n%s\n' % line, encoding='utf-8')
    assert [l for l in requirement_lines(str(path)) if not PIN.match(l)] == [line]
