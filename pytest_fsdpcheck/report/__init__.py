"""The report: what a run's verdicts are and how they are shown.

One concern per module: :mod:`.verdict` (a test report's verdict per
invariant, the keys it travels under, exit statuses), :mod:`.matrix` (the
invariant x implementation matrix assembled from them), :mod:`.content` (the
JSON report, its schema and exploration), :mod:`.terminal` (the header and
summary a run prints), :mod:`.html` and :mod:`.junit` (the other formats).
Here only what users import by name: the JSON report's schema.
"""

from __future__ import annotations

from .content import SCHEMA_VERSION, schema

__all__ = ["SCHEMA_VERSION", "schema"]
