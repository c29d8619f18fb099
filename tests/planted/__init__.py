"""Planted-bug implementations: each breaks exactly one behaviour so the
suite can prove the matching invariant catches it."""
