"""`python3 -m labctl` (from lab/, or with lab/ on sys.path): the same as `python3 lab/labctl.py`."""

import sys

from .cli import main

sys.exit(main())
