"""Planted-bug implementations: each breaks exactly one behaviour so the
suite can prove the matching invariant catches it.

Which planted implementation (or model) must fail which invariant is not
kept here: the tests demand it, through the helpers of tests/demands.py,
from tables named at module level, and tests/test_killers.py takes its
census from those same calls and tables.
"""
