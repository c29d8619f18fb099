"""The gpu tier: what only a CUDA device shows of the suite's own code, run
by the device check (benchmarks/gpu/check.sh) on a lent GPU machine. Each
test skips, naming why, where torch sees no CUDA device (CI, this 2-core
machine), so the tier costs nothing there.

- ``--fsdpcheck-device cuda`` runs the checks on CUDA tensors and says so
  in the header; the report's devices are CUDA's.
- The splitting checks compiled with Inductor on CUDA (SPL-10, SPL-11,
  SPL-17): Triton's kernels and the strides it lays outputs out with, not
  the CPU's C++ ones.
- FS2-15's tensor-parallel step on a one-rank NCCL world (mesh 1x1): the
  control's ``all_gather`` and the step's collectives on CUDA tensors.
"""

import os
import socket

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA device: torch.cuda.is_available() is False here (the gpu tier runs "
                              "in the device check, benchmarks/gpu/check.sh)"),
]


def test_cuda_runs_are_cuda_runs_and_say_so(run_suite):
    result, report = run_suite("torch", "reference", k="test_traversal and test_root_states",
                               extra=("--fsdpcheck-device", "cuda"))
    assert result.ret == 0, "\n".join(result.outlines[-30:])
    result.stdout.fnmatch_lines(["*cuda*"])
    assert report["matrix"]["torch"], report


def test_splits_compiled_by_inductor_on_cuda_pass(run_suite, monkeypatch):
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "inductor")
    result, report = run_suite("torch", "reference", k="test_splitting_compiled",
                               extra=("--fsdpcheck-device", "cuda", "--fsdpcheck-strict"))
    failed = {impl: {inv: cell["outcome"] for inv, cell in cells.items() if cell["outcome"] in ("fail", "error")}
              for impl, cells in report["matrix"].items()}
    assert not any(failed.values()), failed
    assert result.ret == 0, "\n".join(result.outlines[-30:])


def test_the_tp_step_on_a_one_rank_nccl_world():
    from pytest_fsdpcheck.checks.fsdp2_tp import check_fsdp2_tp
    from pytest_fsdpcheck.runs.fsdp2_tp import tp_task

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    try:
        record = tp_task(0, 1, torch.device("cuda", 0), ["reference"])
    finally:
        torch.distributed.destroy_process_group()
    assert record["mesh"] == [1, 1] and "unchecked" not in record, record
    # one tp rank: nothing to sum over tp, so no rounding of a sum either: the control's gradients exactly
    assert check_fsdp2_tp([{"rank": 0, "error": None, "unchecked": {}, "tp": record}], "reference") == []
