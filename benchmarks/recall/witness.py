"""``python -m benchmarks.recall.witness ROW``: the row's witness under the
installed torch, then with the row's patch applied, in this one fresh
process; prints one JSON object (``unpatched``, ``patched``, ``differs``)."""

from __future__ import annotations

import json
import sys

from benchmarks.recall.table import apply, row


def main(row_id: str) -> None:
    bug = row(row_id)
    unpatched = repr(bug.witness())
    if bug.patch is None:
        print(json.dumps({"unpatched": unpatched, "patched": None, "differs": None}))
        return
    apply(row_id)
    patched = repr(bug.witness())
    print(json.dumps({"unpatched": unpatched, "patched": patched, "differs": unpatched != patched}))


if __name__ == "__main__":
    main(sys.argv[1])
