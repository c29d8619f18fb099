"""What the fuzz time budget leaves behind for the report to read: the skip
reason of a test it left out, the run's shared start clock, and the shard part
of a test id. The plugin's fuzz loop (plugin/fuzz.py) writes them; the report
reads them without importing pytest."""

from __future__ import annotations

import re

#: The reason of a suite test a time budget left out (a skip: its cells say
#: "skipped", and nothing is concluded from the tests it did not run).
BUDGET_SKIP = "fsdpcheck: not run within the --fsdpcheck-fuzz-time budget"


def read_start(path: str | None) -> float | None:
    try:
        with open(path) as f:
            return float(f.read())
    except (OSError, TypeError, ValueError):
        return None


#: the shard part of a property's test id (one key per property over every shard)
SHARD_ID = re.compile(r"-?shard\d+of\d+")
