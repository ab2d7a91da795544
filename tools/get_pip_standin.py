# -*- coding: utf-8 -*-
"""Offline stand-in for get-pip.py, used only by `ansible-test sanity` on this project's machines.

ansible-test bootstraps pip in its virtualenvs by running a get-pip.py it downloads from a host
that these machines cannot reach. This stand-in does the same job with the interpreter's own
ensurepip, then upgrades or installs what get-pip was asked for through the configured index,
trusting the machine's CA bundle (HTTPS goes through a proxy here).
"""

import os
import subprocess
import sys

GET_PIP_ONLY_OPTIONS = {"--no-setuptools", "--no-wheel"}
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def main():
    args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY_OPTIONS]
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
    if os.path.exists(CA_BUNDLE):
        args = ["--cert", CA_BUNDLE] + args
    if any(not arg.startswith("-") for arg in args):
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--disable-pip-version-check"] + args)


if __name__ == "__main__":
    main()
