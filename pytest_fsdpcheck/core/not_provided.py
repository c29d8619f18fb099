"""A check that has no input here is *not provided* (``n/p``): one exception
that carries its reason and why, raised where the check finds out.

It is a pytest skip, so pytest, Hypothesis and xdist treat it as one (the
test reads ``SKIPPED``, its message ``not provided: <reason>`` as users know
it), but what the verdict needs is read from the exception, never decoded
from the message: the plugin copies :attr:`NotProvided.reason` and the two
flags below onto the test's report (``plugin/verdicts.py``), and the matrix
reads them there (``report``).
"""

from __future__ import annotations

import pytest

#: what the skip's message starts with, as users read it in pytest's output
PREFIX = "not provided: "


class NotProvided(pytest.skip.Exception):
    """Skip the calling check as not provided, for ``reason``.

    ``case_input``: the reason is a user's case's own (no plan, a graph
    break, not fx-traceable). It says nothing about whether the
    implementation provides the check, so ``--fsdpcheck-strict`` does not
    count it, and a drawn factory draws another configuration instead.

    ``release_lacks``: the feature (``core/provided.py``) the installed torch
    lacks by its release while the check's invariants stay provided (their
    other checks run). It says nothing against them either, so a run
    narrowed to this check draws no "not provided although expected".
    """

    def __init__(self, reason: str, *, case_input: bool = False, release_lacks: str | None = None):
        super().__init__(PREFIX + reason)
        self.reason = reason
        self.case_input = case_input
        self.release_lacks = release_lacks
