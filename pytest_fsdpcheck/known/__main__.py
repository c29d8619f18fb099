"""``python -m pytest_fsdpcheck.known``: the documented name of the known-bugs
command; the command itself lives with the other command-line tools in
:mod:`pytest_fsdpcheck.commands.known`."""

import sys

from ..commands.known import main

if __name__ == "__main__":
    sys.exit(main())
