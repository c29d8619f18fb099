"""Puts one recall row's old behaviour into this interpreter's torch at
start-up, so the suite's own process and every rank it starts (they inherit
the environment) run the old torch. Inert unless ``FSDPCHECK_RECALL_ROW``
names a row; a patch that fails to apply stops the process with status 97
rather than let the suite judge the unpatched release."""

import os
import sys

_ROW = os.environ.get("FSDPCHECK_RECALL_ROW")
if _ROW:
    # the repository root, where `benchmarks` is importable from
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    try:
        from benchmarks.recall.table import apply

        apply(_ROW)
    except BaseException as error:  # noqa: BLE001 - any failure must stop the run, loudly
        print(f"recall: row {_ROW} could not be applied: {type(error).__name__}: {error}", file=sys.stderr)
        os._exit(97)
