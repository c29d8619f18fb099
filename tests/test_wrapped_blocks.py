"""A framework's stack as torch runs it: blocks compiled one by one
(torchtitan's ``torch.compile(block)``, an ``OptimizedModule`` forwarding
attribute reads and writes to the block) or wrapped for activation
checkpointing (``checkpoint_wrapper``) before the plan shards them. torch
reads the Dynamo flags with ``getattr``, through those wrappers; so do the
checks. torch and the reference pass on both models; a walker that takes a
wrapped block for a leaf, or flags the wrapper and not the block, fails."""

import pytest

pytestmark = pytest.mark.unit

pytest.importorskip("torch.distributed.fsdp")

from pytest_fsdpcheck.cases import checks  # noqa: E402
from tests.demands import demand_model_failures  # noqa: E402
from tests.helpers import PLANTED_RUN  # noqa: E402

PLANS = "tests.planted.plans:"
MODELS = (PLANS + "compiled_blocks", PLANS + "checkpointed_blocks")

#: killer -> (invariant, model, implementation)
WRAPPED_PLANTED = {
    "tests.planted.annotation:StopsAtWrappedBlocks": (
        "ANN-1", PLANS + "compiled_blocks", "tests.planted.annotation:StopsAtWrappedBlocks"),
    "tests.planted.fsdp2:FlagsWrapperOnly": ("FS2-7", PLANS + "compiled_blocks", "tests.planted.fsdp2:FlagsWrapperOnly"),
}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("check", ["check_annotation", "check_fully_shard_calls"])
@pytest.mark.parametrize("impl", ["torch", "reference"])
def test_wrapped_blocks_pass_where_torch_is_right(model, check, impl):
    """The issue's false FAILs: ANN-1 and ANN-5 read '<unset>' on a compiled
    block, FS2-7 listed the managed modules without it."""
    checks.run_check(checks.CHECKS[check][0], model, impl)


@pytest.mark.kill
def test_a_walker_wrong_about_wrapped_blocks_fails(run_suite):
    impls = sorted({impl for _, _, impl in WRAPPED_PLANTED.values()})
    extra = [arg for model in MODELS for arg in ("--fsdpcheck-model", model)]
    result, report = run_suite(*impls, "torch", "reference", k="test_model_annotation or test_model_fully_shard_calls",
                               extra=[*PLANTED_RUN, *extra])
    demand_model_failures(result, report, WRAPPED_PLANTED)
    for impl in ("torch", "reference"):
        cells = {inv: cell["outcome"] for inv, cell in report["matrix"][impl].items()}
        assert set(cells.values()) <= {"pass", "not provided"}, (impl, cells)
