#!/usr/bin/env python3
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collections dgxspark.cluster uses, and only those, out of the pinned `ansible` package's wheel (make
setup-runtime): the whole package holds ~470 MB of collections, the collection needs four (and what they depend on).
The same versions as the development install and CI run, without Ansible Galaxy (not reachable everywhere).

    runtime_collections.py WHEEL DEST     unpack ansible_collections/<ns>/<name>/ of each needed collection into DEST
"""

import json
import os
import sys
import zipfile

NEEDED = ('community.docker', 'ansible.posix', 'community.general', 'ansible.utils')
PREFIX = 'ansible_collections/'


def manifest(wheel, name):
    namespace, collection = name.split('.')
    try:
        return json.loads(wheel.read('%s%s/%s/MANIFEST.json' % (PREFIX, namespace, collection)))
    except KeyError:
        raise SystemExit('runtime_collections: %s is not in %s' % (name, wheel.filename))


def needed(wheel, names=NEEDED):
    """The collections to unpack: the names and, transitively, what their MANIFEST.json says they depend on."""
    found, pending = [], list(names)
    while pending:
        name = pending.pop(0)
        if name in found:
            continue
        found.append(name)
        pending.extend(sorted(manifest(wheel, name)['collection_info'].get('dependencies') or {}))
    return found


def unpack(wheel_path, dest, names=NEEDED):
    """Unpack the needed collections into dest (dest/ansible_collections/<ns>/<name>/); returns their names."""
    with zipfile.ZipFile(wheel_path) as wheel:
        chosen = needed(wheel, names)
        prefixes = tuple('%s%s/' % (PREFIX, name.replace('.', '/')) for name in chosen)
        for member in wheel.infolist():
            if member.filename.startswith(prefixes) and not member.is_dir():
                target = os.path.realpath(os.path.join(dest, member.filename))
                if not target.startswith(os.path.realpath(dest) + os.sep):
                    raise SystemExit('runtime_collections: %s leaves %s' % (member.filename, dest))
                wheel.extract(member, dest)
    return chosen


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    for name in unpack(argv[0], argv[1]):
        print('runtime_collections: %s unpacked into %s' % (name, argv[1]))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
