"""Every annotation invariant can fail: each planted bug is caught by its ID."""

import pytest

from tests.demands import demand_failures
from tests.helpers import PLANTED_RUN, selection
from tests.planted.annotation import PLANTED, PLANTED_BESIDE_DYNAMO

pytestmark = pytest.mark.kill


def test_planted_annotation_bugs_are_caught(run_suite):
    result, report = run_suite("reference", *PLANTED, k=f"test_annotation and ({selection(PLANTED)})", extra=PLANTED_RUN)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    # ... each with its ID; the same tests pass on the reference each bug was planted in
    demand_failures(result, report, PLANTED)


def test_a_planted_graph_break_beside_dynamos_known_bug_fails_ann8(run_suite):
    """The planted implementation declares Dynamo's known bug, as the
    reference does; its own hook's graph breaks still FAIL ANN-8, and the
    reference reads known exactly where the bug applies."""
    import torch

    from pytest_fsdpcheck.core.torch_support import compile_unsupported
    from pytest_fsdpcheck.impls.torch_bugs import DYNAMO_RUNTIME_BUGS

    result, report = run_suite("reference", *PLANTED_BESIDE_DYNAMO, k="test_annotation and test_dynamo_specialisation",
                               extra=PLANTED_RUN)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, PLANTED_BESIDE_DYNAMO, control=None)
    (bug,) = [b for b in DYNAMO_RUNTIME_BUGS if b.id == "ann-fsdp-int-attr-symbolic"]
    expected = ("n/p" if compile_unsupported() else
                "known" if bug.applies_to_version(torch.__version__) else "pass")
    assert report["matrix"]["reference"]["ANN-8"]["outcome"] == expected, report["matrix"]["reference"]
