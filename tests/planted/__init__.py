"""Planted-bug implementations: each breaks exactly one behaviour so the
suite can prove the matching invariant catches it.

:func:`killers` is the registry of which planted implementation fails which
invariant. It is read from the very tables the planted tests assert on (each
``tests/test_planted_*.py`` imports its table and requires a ``fail`` cell
for every entry), so an entry here is a failure some test demands; the few
tests that keep their list inline are named in ``INLINE`` and
tests/test_killers.py checks that their source still asserts it.
"""

from __future__ import annotations

#: (killer, invariant) -> the test module whose inline list asserts that the
#: killer fails the invariant
INLINE = {
    ("tests.planted.distributed:ExtraBucket", "SPL-16"): "tests/test_planted_distributed.py",
    ("tests.planted.distributed:MissingBucket", "SPL-16"): "tests/test_planted_distributed.py",
    ("tests.planted.distributed:DropsFirstLeaf", "FS2-9"): "tests/test_planted_distributed.py",
    ("tests.planted.distributed:ShardsIgnored", "FS2-9"): "tests/test_planted_distributed.py",
    ("tests.planted.distributed:ParentFirst", "FS2-9"): "tests/test_planted_distributed.py",
    ("tests.planted.exec_order:BufferProxiesAsParams", "EXO-3"): "tests/test_planted_exec_order.py",
    ("tests.planted.plans:tied_split", "PLN-1"): "tests/test_plans.py",
    ("tests.planted.plans:shared_module", "PLN-2"): "tests/test_plans.py",
    ("tests.planted.plans:unsharded_root", "PLN-3"): "tests/test_plans.py",
    ("tests.planted.plans:unsharded_root", "PLN-4"): "tests/test_plans.py",
    ("tests.planted.plans:root_first", "PLN-4"): "tests/test_plans.py",
    # the golden corpus: tests/test_golden_corpus.py and tests/test_golden_accept.py
    ("tests.planted.golden:ReversedParamOrder", "EXO-3"): "tests/test_golden_corpus.py",
    ("tests.planted.traversal:UnfilteredRoots", "TRV-7"): "tests/test_golden_accept.py",
}


def _ids(wanted) -> tuple[str, ...]:
    return (wanted,) if isinstance(wanted, str) else tuple(wanted)


def killers() -> dict[str, set[str]]:
    """invariant ID -> the planted implementations (``module:name``) that a
    test requires to fail it. An entry whose table allows alternatives
    ("TRV-2 or TRV-3") counts for neither: only a demanded failure kills."""
    from . import annotation, exec_order, fsdp2, splitting, traversal

    table: dict[str, set[str]] = {}

    def add(spec, wanted):
        ids = _ids(wanted)
        if len(ids) == 1:
            table.setdefault(ids[0], set()).add(spec)

    for planted in (annotation.PLANTED, traversal.PLANTED, fsdp2.PLANTED, fsdp2.CORPUS_PLANTED):
        for spec, (wanted, _selection) in planted.items():
            add(spec, wanted)
    for invariant, name in exec_order.ALL.items():
        add(f"tests.planted.exec_order:{name}", invariant)
    for name, (invariant, _case) in exec_order.REAL_FORWARD_PLANTED.items():
        add(f"tests.planted.exec_order:{name}", invariant)
    for name, invariant in splitting.TARGETS.items():
        add(f"tests.planted.splitting:{name}", invariant)
    for spec, invariant in INLINE:
        add(spec, invariant)
    return table
