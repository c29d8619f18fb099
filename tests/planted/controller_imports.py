"""``-p tests.planted.controller_imports``: at its end, the xdist controller
(or a serial run) writes which heavy modules it had imported to the file
``FSDPCHECK_TEST_IMPORTS`` names: the controller runs no test, and neither
torch nor an implementation is imported there."""

import json
import os
import sys

WATCHED = ("torch", "tests.planted.traversal", "tests.planted.annotation")


def pytest_unconfigure(config):
    path = os.environ.get("FSDPCHECK_TEST_IMPORTS")
    if path and not hasattr(config, "workerinput"):
        with open(path, "w") as out:
            json.dump({name: name in sys.modules for name in WATCHED}, out)
