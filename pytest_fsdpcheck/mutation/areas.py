"""What each area's mutants are made from: the installed torch's files and,
in each, the seed functions; and which checks judge them.

Paths are relative to the installed ``torch`` package. A release that moved a
file lists its older home too; the first one present is used.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    #: candidate paths inside the torch package, newest release's first
    paths: tuple[str, ...]
    #: top-level functions/classes or ``Class.method`` names; what they call
    #: or reference in the same file is added (see :mod:`.scope`)
    seeds: tuple[str, ...]


@dataclass(frozen=True)
class Area:
    name: str
    #: the ``-k`` expression selecting the area's conformance checks
    checks: str
    sources: tuple[Source, ...]


_FSDP2 = ("distributed/fsdp/_fully_shard/", "distributed/_composable/fsdp/")

AREAS = {
    area.name: area
    for area in (
        Area("traversal", "traversal", (
            Source(("distributed/fsdp/_traversal_utils.py",),
                   ("_get_fsdp_states_with_modules", "_get_fsdp_states", "_get_fsdp_handles")),
        )),
        Area("annotation", "annotation", (
            Source(("distributed/fsdp/_dynamo_utils.py",), ("_annotate_modules_for_dynamo",)),
        )),
        # SPL-16 too: DDPOptimizer's fake-tensor compile path (SubmodCompiler,
        # DDPOptimizerContext) runs only under torch.compile of a real DDP module
        Area("splitting", "splitting or test_compiled_ddp_matches_plan_and_eager", (
            Source(("_dynamo/backends/distributed.py",), ("DDPOptimizer",)),
        )),
        Area("exec_order", "exec_order", (
            Source(("distributed/fsdp/_trace_utils.py",), ("_ExecOrderTracer",)),
        )),
        Area("fsdp2", "fsdp2", (
            Source(tuple(home + "_fsdp_init.py" for home in _FSDP2),
                   ("_get_managed_modules", "_get_managed_states", "_verify_managed_param")),
            # the composable state checks the walk asks: is a module
            # composable with FSDP, does it hold a state of its own
            Source(tuple(home + "_fsdp_common.py" for home in _FSDP2), ("_is_composable_with_fsdp",)),
            Source(tuple(home + "_fsdp_state.py" for home in _FSDP2), ("_get_module_fsdp_state",)),
            Source(("distributed/_composable_state.py",), ("_get_module_state", "_insert_module_state")),
            Source(("distributed/_composable/contract.py",), ("_get_registry",)),
        )),
    )
}
