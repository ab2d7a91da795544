#!/usr/bin/env bash
# Run `ansible-test sanity` on a copy of the collection laid out as
# .build/sanity/ansible_collections/dgxspark/cluster (ansible-test needs that path; the repo stays put).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
tree=".build/sanity/ansible_collections/dgxspark/cluster"

# ansible-test downloads get-pip.py from a host these machines cannot reach; give it the stand-in
# at the cache path it looks in, for the pip version this ansible-test pins.
pip_version=$(.venv/bin/python - <<'PY'
import inspect
import re
from ansible_test._internal import python_requirements
source = inspect.getsource(python_requirements.get_venv_packages)
print(re.search(r"pip='([0-9.]+)'", source).group(1))
PY
)
mkdir -p "$HOME/.ansible/test/cache"
cp tools/get_pip_standin.py "$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"

rm -rf .build/sanity
mkdir -p "$tree"
# Tracked and new (not ignored) files only, as a fresh clone would hold them; without the lab,
# molecule, bench and tooling trees, which galaxy.yml's build_ignore keeps out of the collection
# (they are scripts and test beds, checked by their own tests, not plugins).
git ls-files -z --cached --others --exclude-standard \
    | grep -z -v -E '^(lab|bench|molecule|tools|\.config|\.ci|tests/lab|tests/serving)/' \
    | xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh \
    | tar --null -T - -cf - | tar -C "$tree" -xf -
cd "$tree"
git init -q && git add -A && git -c user.email=ci@localhost -c user.name=ci commit -qm sanity
PATH="$root/.venv/bin:$PATH" ansible-test sanity --local --python 3.11 --color no "$@"
