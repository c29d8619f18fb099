"""Every invariant in the catalog can fail: at least one planted
implementation is required by a test to fail it. Adding an ID to the catalog
without a killer fails here."""

import importlib
from pathlib import Path

from pytest_fsdpcheck.catalog import INVARIANTS
from tests.planted import INLINE, killers

ROOT = Path(__file__).resolve().parent.parent


def test_every_invariant_has_a_killer():
    table = killers()
    missing = sorted(set(INVARIANTS) - set(table))
    assert not missing, f"invariants no planted implementation is required to fail: {missing}"


def test_every_killer_is_a_planted_implementation_of_a_catalog_id():
    for invariant, specs in killers().items():
        assert invariant in INVARIANTS, f"{invariant} is not in the catalog (killed by {sorted(specs)})"
        for spec in specs:
            module, _, name = spec.partition(":")
            assert module.startswith("tests.planted."), spec
            assert hasattr(importlib.import_module(module), name), f"{spec} does not exist"


def test_inline_killers_are_asserted_by_their_tests():
    """The entries not read from a planted table: the test named for each
    must still mention the killer and the ID it requires it to fail."""
    for (spec, invariant), test in INLINE.items():
        source = (ROOT / test).read_text(encoding="utf-8")
        name = spec.rpartition(":")[2]
        assert name in source and invariant in source, f"{test} no longer asserts that {spec} fails {invariant}"


def test_the_registry_notices_a_catalog_id_without_a_killer(monkeypatch):
    from pytest_fsdpcheck import catalog

    monkeypatch.setitem(catalog.INVARIANTS, "NEW-1", next(iter(catalog.INVARIANTS.values())))
    assert "NEW-1" not in killers()
    assert sorted(set(catalog.INVARIANTS) - set(killers())) == ["NEW-1"]
