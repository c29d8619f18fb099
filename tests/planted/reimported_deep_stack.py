"""A module of tests.planted.reimports' own, re-imported by its calls: its
import-time code raises the recursion limit far enough that a recursive walk
of the suite's deep chains no longer runs out of it."""

import sys

sys.setrecursionlimit(max(sys.getrecursionlimit(), 60_000))
