# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runtime install (make setup-runtime, issue 48): ansible-core and the plugins' libraries from
requirements-runtime.txt, and only the four collections the collection uses, unpacked from the pinned `ansible` wheel
(tools/runtime_collections.py) with what their MANIFEST.json says they depend on. The wheel here is made in the
layout of the real one (ansible 12.3.0: ansible_collections/<namespace>/<name>/MANIFEST.json with
collection_info.dependencies)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SPEC = importlib.util.spec_from_file_location('runtime_collections', os.path.join(ROOT, 'tools', 'runtime_collections.py'))
rc = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(rc)

# As in ansible-12.3.0-py3-none-any.whl (pip download --no-deps ansible==12.3.0).
COLLECTIONS = {
    'community.docker': ('4.8.5', {'community.library_inventory_filtering_v1': '>=1.0.0'}),
    'community.library_inventory_filtering_v1': ('1.1.5', {}),
    'ansible.posix': ('2.1.0', {}),
    'community.general': ('11.4.2', {}),
    'ansible.utils': ('6.0.0', {}),
    'amazon.aws': ('10.1.2', {}),
    'ansible.netcommon': ('8.2.0', {'ansible.utils': '>=3.0.0'}),
}


def wheel(tmp_path, collections=None):
    path = tmp_path / 'ansible-12.3.0-py3-none-any.whl'
    with zipfile.ZipFile(str(path), 'w') as archive:
        for name, (version, dependencies) in (collections or COLLECTIONS).items():
            base = 'ansible_collections/%s/' % name.replace('.', '/')
            namespace, collection = name.split('.')
            archive.writestr(base + 'MANIFEST.json', json.dumps({'collection_info': {
                'namespace': namespace, 'name': collection, 'version': version, 'dependencies': dependencies}}))
            archive.writestr(base + 'plugins/modules/%s_module.py' % collection, '# %s\n' % name)
        archive.writestr('ansible-12.3.0.dist-info/METADATA', 'Name: ansible\n')
    return str(path)


def test_only_the_needed_collections_and_their_dependencies_are_unpacked(tmp_path):
    dest = tmp_path / 'collections'
    chosen = rc.unpack(wheel(tmp_path), str(dest))
    assert chosen == ['community.docker', 'ansible.posix', 'community.general', 'ansible.utils',
                      'community.library_inventory_filtering_v1']
    unpacked = sorted('%s.%s' % tuple(p.parent.relative_to(dest / 'ansible_collections').parts)
                      for p in dest.rglob('MANIFEST.json'))
    assert unpacked == sorted(chosen)
    assert not (dest / 'ansible_collections' / 'amazon').exists() and not (dest / 'ansible-12.3.0.dist-info').exists()
    assert (dest / 'ansible_collections/community/docker/plugins/modules/docker_module.py').read_text() == '# community.docker\n'


def test_a_needed_collection_missing_from_the_wheel_is_named(tmp_path):
    without = dict((k, v) for k, v in COLLECTIONS.items() if k != 'ansible.posix')
    with pytest.raises(SystemExit, match='ansible.posix is not in .*ansible-12.3.0-py3-none-any.whl'):
        rc.unpack(wheel(tmp_path, without), str(tmp_path / 'collections'))


def requirement_names(path):
    with open(os.path.join(ROOT, path), encoding='utf-8') as handle:
        return dict(re.match(r'^([A-Za-z0-9_.\[\]-]+)==(\S+)$', line).groups() for line in handle
                    if line.strip() and not line.startswith(('#', '-r')))


def test_the_runtime_pins_are_the_development_pins_without_the_test_tools():
    runtime, development = requirement_names('requirements-runtime.txt'), requirement_names('requirements.txt')
    with open(os.path.join(ROOT, 'requirements.txt'), encoding='utf-8') as handle:
        assert '-r requirements-runtime.txt\n' in handle.read()  # one pin for each package of both installs
    assert not set(runtime) & set(development)
    assert 'ansible-core' in runtime and 'ansible' not in runtime  # the whole Ansible package: development only
    assert 'ansible' in development  # setup.sh takes the runtime's collections from this pinned wheel
    assert not set(runtime) & {'ansible-lint', 'yamllint', 'molecule', 'pytest', 'pytest-testinfra', 'pytest-xdist',
                               'openai'}
