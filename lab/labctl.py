#!/usr/bin/env python
"""labctl: the virtual DGX Spark lab of dgxspark.cluster (`python3 lab/labctl.py --help`; see lab/README.md).

The entry script of the package lab/labctl/ (usage and layout: lab/labctl/__init__.py).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from labctl.cli import main  # noqa: E402  pylint: disable=wrong-import-position

if __name__ == "__main__":
    sys.exit(main())
