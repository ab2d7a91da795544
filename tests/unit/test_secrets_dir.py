"""The controller's secrets directory: one per inventory (its name and a digest of its real path), never shared by two
inventories of one name; an inventory whose secrets are still in the old directory shared by name is refused with the
command that moves them, before anything is generated."""
import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.filter.secrets_dir import controller_secrets_dir as secrets_filter
from ansible_collections.dgxspark.cluster.plugins.plugin_utils.secrets_dir import (
    controller_secrets_dir, secrets_dir_problem, shared_secrets_dir)
from ansible.errors import AnsibleFilterError


@pytest.fixture(name="checkouts")
def fixture_checkouts(tmp_path):
    """Two checkouts, each with inventories/prod, and a link to the first."""
    for checkout in ("a", "b"):
        (tmp_path / checkout / "inventories" / "prod").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "a")
    return tmp_path


@pytest.mark.parametrize("first, second, same", [
    ("a/inventories/prod", "b/inventories/prod", False),   # namesakes in two checkouts
    ("a/inventories/prod", "link/inventories/prod", True),  # one inventory reached through a symlink
    ("a/inventories/prod", "a/inventories/prod/", True),    # a trailing slash
    ("a/inventories/prod", "a/inventories/../inventories/prod", True),
])
def test_one_directory_per_inventory_whatever_the_path_says(checkouts, first, second, same):
    one, two = (controller_secrets_dir(str(checkouts / path), home="/home/op") for path in (first, second))
    assert (one == two) is same, (one, two)
    assert os.path.dirname(one) == "/home/op/.config/dgxspark"
    assert os.path.basename(one).startswith("prod-") and len(os.path.basename(one)) == len("prod-") + 12


def test_the_filter_uses_the_controllers_home_and_refuses_no_inventory(checkouts, monkeypatch):
    monkeypatch.setenv("HOME", str(checkouts / "home"))
    assert secrets_filter(str(checkouts / "a/inventories/prod")) == controller_secrets_dir(
        str(checkouts / "a/inventories/prod"), home=str(checkouts / "home"))
    with pytest.raises(AnsibleFilterError, match="no inventory directory"):
        secrets_filter("")


@pytest.mark.parametrize("old_exists, new_exists, refused", [
    (False, False, False),  # a first deploy: the roles generate the secrets in the new directory
    (True, False, True),    # secrets from an older release: moved by the user, never generated anew
    (True, True, False),    # already moved (the old one is another inventory's)
    (False, True, False),
])
def test_secrets_left_in_the_directory_shared_by_name_are_refused_with_the_move(checkouts, old_exists, new_exists, refused):
    home, inventory = str(checkouts / "home"), str(checkouts / "a/inventories/prod")
    old, new = shared_secrets_dir(inventory, home), controller_secrets_dir(inventory, home)
    for path, exists in ((old, old_exists), (new, new_exists)):
        if exists:
            os.makedirs(path)
    problem = secrets_dir_problem(inventory, home)
    assert bool(problem) is refused
    if refused:
        assert "run `mv %s %s`" % (old, new) in problem and "set dgxspark_secrets_dir" in problem
