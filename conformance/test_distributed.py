"""SPL-16: ``torch.compile`` of a real ``DistributedDataParallel`` module.

Ranks are real processes in a real process group (gloo on CPU, NCCL when the
device is CUDA and there are enough GPUs). One run per world size and device
serves every implementation of the session: each rank plans the graph Dynamo
handed to DDPOptimizer with every implementation, so the processes (the slow
part) start once, not once per implementation.
"""

import pytest

from pytest_fsdpcheck.checks.distributed import check_ddp_end_to_end
from pytest_fsdpcheck.checks.repro import snippet
from pytest_fsdpcheck.impls.torch_support import require_compile
from pytest_fsdpcheck.known import conform
from pytest_fsdpcheck.plugin import get_session

RANK_TIMEOUT_S = 120.0
_runs: dict = {}


def _spec_of(config, impl) -> str:
    session = get_session(config)
    return next(spec for spec, obj in session.impls.items() if obj is impl)


def _results(config, world_size: int, device: str) -> list[dict]:
    from pytest_fsdpcheck.checks.ddp_run import run_ranks

    specs = tuple(get_session(config).impls)
    key = (world_size, device, specs)
    if key not in _runs:
        _runs[key] = run_ranks(world_size, device, specs, timeout=RANK_TIMEOUT_S)
    return _runs[key]


@pytest.mark.invariant("SPL-16")
@pytest.mark.parametrize("world_size", [1, 2])
def test_compiled_ddp_matches_plan_and_eager(fsdpcheck_impl, fsdpcheck_device, world_size, request):
    import torch

    if fsdpcheck_device == "cuda" and torch.cuda.device_count() < world_size:
        pytest.skip(f"world size {world_size} on CUDA needs {world_size} GPUs, found {torch.cuda.device_count()}")
    if not torch.distributed.is_available():
        pytest.skip("this torch build has no torch.distributed")
    require_compile()
    spec = _spec_of(request.config, fsdpcheck_impl)
    results = _results(request.config, world_size, fsdpcheck_device)
    # The ranks ran in other processes: the outcome is judged as it is, not replayed.
    conform(
        fsdpcheck_impl,
        check_ddp_end_to_end(results, spec),
        snippet(
            fsdpcheck_impl,
            [
                'if __name__ == "__main__":  # spawned ranks re-import this file',
                f"    results = run_ranks({world_size}, {fsdpcheck_device!r}, [{spec!r}])",
            ],
            [f"    violations = check_ddp_end_to_end(results, {spec!r})", "    assert not violations, violations"],
            imports=[
                "from pytest_fsdpcheck.checks.ddp_run import run_ranks",
                "from pytest_fsdpcheck.checks.distributed import check_ddp_end_to_end",
            ],
        ),
    )
