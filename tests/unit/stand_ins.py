"""Stand-in programs for the unit tests that run our scripts and modules as they run on a node: a program of a given
text in a directory of its own, put first on PATH."""

import os


def stand_in(bin_dir, name, text):
    """Write `text` as the executable `bin_dir/name` (bin_dir made if needed); returns its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    program = bin_dir / name
    program.write_text(text)
    program.chmod(0o755)
    return program


def path_first(bin_dir):
    """PATH with bin_dir before the test process's own."""
    return "%s%s%s" % (bin_dir, os.pathsep, os.environ["PATH"])
