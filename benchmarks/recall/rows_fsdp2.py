"""Real bugs of torch's FSDP2 (``fully_shard``): its walk and annotation at init
and the runtime parts FS2-9 drives, read from the released wheels' source
2.3.1 … 2.15.0 (latest patch of each minor). The survey beside this file
(``survey_fsdp2.md``) lists every change read and why the others are not rows.

Runtime rows start a one-rank gloo world in the witness (a free local port,
destroyed afterwards): enough for ``fully_shard`` and its lazy init, which is
where each of these behaviours shows.
"""

from __future__ import annotations

import contextlib
import importlib
import socket

from benchmarks.recall.row import RealBug

_INIT = "torch.distributed.fsdp._fully_shard._fsdp_init"
_API = "torch.distributed.fsdp._fully_shard._fully_shard"
_PARAM_GROUP = "torch.distributed.fsdp._fully_shard._fsdp_param_group"
_PARAM = "torch.distributed.fsdp._fully_shard._fsdp_param"


def _mod(name):
    return importlib.import_module(name)


@contextlib.contextmanager
def _one_rank_world():
    """A one-rank gloo process group and a 1-D CPU mesh over it."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def _outcome(fn):
    """``fn()``'s value, or the exception's type and first line."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - the witness reports what torch raised
        return (type(e).__name__, str(e).splitlines()[0] if str(e) else "")


# --------------------------------------------------------------------------- walk rows


def _patch_scalar_accepted(mp) -> None:
    """torch 2.3/2.4's ``_get_managed_states``: no check of a parameter's
    shape (``_verify_managed_param`` arrived in 2.5). The states function looks
    the check up in its own module's globals, so replacing it there is enough."""
    mp.setattr(_mod(_INIT), "_verify_managed_param", lambda name, param: None)


def _witness_scalar_accepted():
    """What ``_get_managed_states`` does with a module holding a 0-dim
    parameter: the collected parameter shapes, or the error it raises."""
    import torch
    import torch.nn as nn

    m = nn.Linear(2, 2)
    m.scale = nn.Parameter(torch.tensor(1.0))
    init = _mod(_INIT)
    return _outcome(lambda: [tuple(p.shape) for p in init._get_managed_states([m])[0]])


def _patch_container_subclass_rejected(mp) -> None:
    """torch 2.3 … 2.11's container check: every ``nn.ModuleList`` /
    ``nn.ModuleDict`` is rejected, subclasses that implement ``forward``
    included (2.12 rejects only those whose ``forward`` is ``nn.Module``'s).
    ``_fully_shard`` binds ``_validate_module`` by name, so it is replaced
    there as well as in ``_fsdp_init``."""
    import torch.nn as nn

    def _validate_module(module, func_name):
        if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            raise ValueError(f"{func_name} does not support containers that do not implement forward: {module}")

    for name in (_INIT, _API):
        mp.setattr(_mod(name), "_validate_module", _validate_module)


def _witness_container_subclass_rejected():
    """``fully_shard``'s container check (as ``fully_shard`` calls it, through
    ``_fully_shard``'s binding) on a ModuleList subclass with its own forward,
    and on a plain ModuleList."""
    import torch.nn as nn

    class Heads(nn.ModuleList):
        def forward(self, x):
            return [m(x) for m in self]

    api = _mod(_API)
    return (
        _outcome(lambda: api._validate_module(Heads([nn.Linear(2, 2)]), "fully_shard"))[0],
        _outcome(lambda: api._validate_module(nn.ModuleList([nn.Linear(2, 2)]), "fully_shard"))[0],
    )


# ------------------------------------------------------------------------ runtime rows


def _patch_frozen_dtype_asserted(mp) -> None:
    """torch 2.3 … 2.7's ``FSDPParamGroup._init_mp_dtypes``: every parameter
    of the group, frozen or not, must share one original dtype and one reduce
    dtype, else an AssertionError at the group's lazy init (2.8 reads the
    trainable parameters only, pytorch/pytorch#154103)."""
    group_cls = _mod(_PARAM_GROUP).FSDPParamGroup

    def _init_mp_dtypes(self):
        for fsdp_param in self.fsdp_params:
            fsdp_param.init_dtype_attrs(self.mp_policy)
        orig_dtypes = {p.orig_dtype for p in self.fsdp_params}
        if len(orig_dtypes) != 1:
            raise AssertionError(f"FSDP expects uniform original parameter dtype but got {orig_dtypes}")
        self._orig_dtype = next(iter(orig_dtypes))
        reduce_dtypes = {p.reduce_dtype for p in self.fsdp_params}
        if len(reduce_dtypes) != 1:
            raise AssertionError(f"FSDP expects uniform reduce dtype but got {reduce_dtypes}")
        self._reduce_dtype = next(iter(reduce_dtypes))

    mp.setattr(group_cls, "_init_mp_dtypes", _init_mp_dtypes)


def _witness_frozen_dtype_asserted():
    """A first forward of one ``fully_shard`` group holding a trainable fp32
    Linear and a frozen bf16 parameter (the frozen-base / trainable-adapter
    shape): its output shape, or what the lazy init raised."""
    import torch
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    class Adapted(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.base = nn.Parameter(torch.ones(4, dtype=torch.bfloat16), requires_grad=False)

        def forward(self, x):
            return self.lin(x) * self.base.float()

    with _one_rank_world() as mesh:
        torch.manual_seed(0)
        model = Adapted()
        fully_shard(model, mesh=mesh)
        return _outcome(lambda: tuple(model(torch.randn(2, 4)).shape))


def _witness_frozen_mp_latched():
    """The original and reduce dtypes a ``fully_shard`` group with an
    ``mp_policy`` (bf16 parameters, fp32 reduction) holds after a first
    forward run with all its parameters frozen (pytorch/pytorch#186998's
    shape): ``None`` latched on 2.8 … 2.13, fp32 on 2.14."""
    import torch
    import torch.nn as nn
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    with _one_rank_world() as mesh:
        torch.manual_seed(0)
        model = nn.Linear(4, 4)
        mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        fully_shard(model, mesh=mesh, mp_policy=mp_policy)
        for p in model.parameters():
            p.requires_grad_(False)
        model(torch.randn(2, 4))
        group = model._get_fsdp_state()._fsdp_param_groups[0]
        return (str(group._orig_dtype), str(group._reduce_dtype))


def _patch_int_param_rejected(mp) -> None:
    """torch 2.3 … 2.11's ``FSDPParam._init_sharded_param``: the sharded
    DTensor is wrapped in ``nn.Parameter`` with its default
    ``requires_grad=True`` before the original flag is set, which an integer
    tensor refuses. Put back as that refusal, ahead of 2.13's method."""
    import torch

    param_cls = _mod(_PARAM).FSDPParam
    original = param_cls._init_sharded_param

    def _init_sharded_param(self, param, *args, **kwargs):
        if not (param.is_floating_point() or param.is_complex()):
            torch.nn.Parameter(torch.empty(0, dtype=param.dtype))  # raises as 2.11's wrapping did
        return original(self, param, *args, **kwargs)

    mp.setattr(param_cls, "_init_sharded_param", _init_sharded_param)


def _witness_int_param_rejected():
    """``fully_shard`` on a module holding a frozen integer parameter (an
    index): whether it is sharded, or what it raises."""
    import torch
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    class Indexed(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.idx = nn.Parameter(torch.tensor([1, 3]), requires_grad=False)

    with _one_rank_world() as mesh:
        return _outcome(lambda: type(fully_shard(Indexed(), mesh=mesh)).__name__ != "")


def _patch_grad_sync_recurse_ignored(mp) -> None:
    """torch 2.3's ``FSDPModule.set_requires_gradient_sync`` and
    ``set_requires_all_reduce``: they walk ``self.modules()`` whatever
    ``recurse`` says (fixed in 2.4, pytorch/pytorch#124318)."""
    fsdp_module = _mod(_API).FSDPModule

    def _every_group(self):
        for module in self.modules():
            if isinstance(module, fsdp_module):
                yield from module._get_fsdp_state()._fsdp_param_groups

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        for group in _every_group(self):
            group.reduce_grads = requires_gradient_sync
            group.all_reduce_grads = requires_gradient_sync

    def set_requires_all_reduce(self, requires_all_reduce, *, recurse=True):
        for group in _every_group(self):
            group.all_reduce_grads = requires_all_reduce

    mp.setattr(fsdp_module, "set_requires_gradient_sync", set_requires_gradient_sync)
    mp.setattr(fsdp_module, "set_requires_all_reduce", set_requires_all_reduce)


def _witness_grad_sync_recurse_ignored():
    """After ``root.set_requires_gradient_sync(False, recurse=False)`` on a
    root whose child has its own group: whether the child's group still
    reduces its gradients (and the root's)."""
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    with _one_rank_world() as mesh:
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        fully_shard(model[0], mesh=mesh)
        fully_shard(model, mesh=mesh)
        model.set_requires_gradient_sync(False, recurse=False)

        def reduces(module):
            return [g.reduce_grads for g in module._get_fsdp_state()._fsdp_param_groups]

        return {"child": reduces(model[0]), "root": reduces(model)}


def _patch_gloo_grads_summed(mp) -> None:
    """What torch 2.7 and 2.8 did on gloo: a sharded gradient reduced as a
    sum over the ranks where FSDP2 asks for their mean (the request was
    right; gloo's reduce-scatter did not average). Put back as the request
    a summing backend answers: no pre- or post-division, SUM for the
    reduce-scatter and the all-reduce, on gloo groups only."""
    import torch.distributed as dist

    collectives = _mod("torch.distributed.fsdp._fully_shard._fsdp_collectives")
    original = collectives._get_gradient_divide_factors

    def _get_gradient_divide_factors(reduce_scatter_group, *args, **kwargs):
        if dist.get_backend(reduce_scatter_group) == "gloo":
            return None, None, dist.ReduceOp.SUM, dist.ReduceOp.SUM
        return original(reduce_scatter_group, *args, **kwargs)

    mp.setattr(collectives, "_get_gradient_divide_factors", _get_gradient_divide_factors)


def _gloo_factors(rank, port, queue):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        collectives = _mod("torch.distributed.fsdp._fully_shard._fsdp_collectives")
        factors = collectives._get_gradient_divide_factors(dist.group.WORLD, None, torch.float32, "cpu")
        if rank == 0:
            queue.put(tuple(str(x) for x in factors))
    finally:
        dist.destroy_process_group()


def _witness_gloo_grads_summed():
    """The division and reduce ops FSDP2 chooses for a two-rank gloo group
    in fp32 (two processes forked from this one, so a patch applied here is
    theirs too)."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = [context.Process(target=_gloo_factors, args=(rank, port, queue)) for rank in range(2)]
    for process in ranks:
        process.start()
    factors = queue.get(timeout=120)
    for process in ranks:
        process.join(60)
    return factors


def _patch_state_mapping_strong(mp) -> None:
    """torch 2.3 … 2.5's composable-state mapping: a plain dict from module
    to state, so every module ever given a state (by fully_shard, or
    replicate) stays alive with its parameters after the caller drops it
    (pytorch/pytorch#139650 made it weak in 2.6)."""
    state = _mod("torch.distributed._composable_state")
    strong: dict = {}
    original = state._insert_module_state

    def _insert_module_state(module, module_state):
        original(module, module_state)
        strong[module] = module_state

    # FSDP2's state module binds the function by name at import
    for home in (state, _mod("torch.distributed.fsdp._fully_shard._fsdp_state")):
        mp.setattr(home, "_insert_module_state", _insert_module_state)


def _witness_state_mapping_strong():
    """Whether a model given fully_shard (one-rank gloo world) is still
    alive after the caller drops it and the garbage collector runs."""
    import gc
    import weakref

    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    with _one_rank_world() as mesh:
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        fully_shard(model[0], mesh=mesh)
        fully_shard(model, mesh=mesh)
        alive = weakref.ref(model)
        del model
        gc.collect()
        return alive() is not None


ROWS: tuple[RealBug, ...] = (
    RealBug(
        id="fs2-scalar-param-accepted",
        area="fsdp2",
        behaviour="fully_shard's states (_get_managed_states) collect a 0-dim parameter without complaint; it cannot "
        "be sharded on dim 0, so fully_shard fails later, away from the module that holds it.",
        had="2.3.1 … 2.4.1",
        fixed_in="2.5.1",
        upstream=("pytorch/pytorch#132934",),
        patch=_patch_scalar_accepted,
        witness=_witness_scalar_accepted,
        invariants=("FS2-4",),
        known="fs2-scalar-param-accepted",
        note="Read from the wheels' source: 2.3.1 and 2.4.1 iterate `module.parameters(recurse=False)` with no shape "
        "check; 2.5.1 adds `_verify_managed_param` (ValueError naming the parameter), kept to 2.15.0. The patch "
        "makes that check a no-op.",
    ),
    RealBug(
        id="fs2-container-subclass-rejected",
        area="fsdp2",
        behaviour="fully_shard raises ValueError ('does not support containers that do not implement forward') for "
        "any nn.ModuleList/nn.ModuleDict, a subclass that does implement forward included.",
        had="2.3.1 … 2.11.0",
        fixed_in="2.12.1",
        upstream=("pytorch/pytorch#167856", "pytorch/pytorch#168905", "pytorch/pytorch#175033"),
        patch=_patch_container_subclass_rejected,
        witness=_witness_container_subclass_rejected,
        invariants=("FS2-7",),
        known="fs2-container-with-forward-rejected",
        note="Read from the source: `isinstance(module, (nn.ModuleList, nn.ModuleDict))` in fully_shard itself "
        "2.3.1 … 2.10.0, moved to _fsdp_init._validate_module in 2.11.0 unchanged; 2.12.1 adds `and "
        "module.__class__.forward is nn.Module.forward`. Issue #167856 reports it; #168905 and its duplicate "
        "#175033 fix it. The witness calls the check as fully_shard does (no process group).",
    ),
    RealBug(
        id="fs2-frozen-dtypes-asserted",
        area="fsdp2",
        behaviour="A fully_shard group whose frozen parameters have another dtype than its trainable ones (a frozen "
        "bf16 base beside fp32 adapters) fails its first forward with AssertionError 'FSDP expects uniform original "
        "parameter dtype', though frozen parameters are never reduced.",
        had="2.3.1 … 2.7.1",
        fixed_in="2.8.0",
        upstream=("pytorch/pytorch#154082", "pytorch/pytorch#154103"),
        patch=_patch_frozen_dtype_asserted,
        witness=_witness_frozen_dtype_asserted,
        invariants=("FS2-12",),
        known="fs2-frozen-dtypes-asserted",
        note="Read from the source: FSDPParamGroup._init_mp_dtypes takes every fsdp_param's orig and reduce dtype "
        "in 2.3.1 … 2.7.1 and only `sharded_param.requires_grad` ones from 2.8.0 (PR #154103, fixing #154082). "
        "That same change introduced fs2-frozen-mp-latched (a group frozen at lazy init latches None). The witness "
        "runs in a one-rank gloo world.",
    ),
    RealBug(
        id="fs2-frozen-mp-latched",
        area="fsdp2_runtime",
        behaviour="A fully_shard group with an mp_policy whose parameters are all frozen at its first forward "
        "(its lazy init) latches None as its original and reduce dtypes; unfrozen for training, its first backward "
        "then hands the reduce-scatter's gradient back uncast (torch 2.13 raises a grad_dtype error).",
        had="2.8.0 … 2.13.0",
        fixed_in="2.14.1",
        upstream=("pytorch/pytorch#186998", "pytorch/pytorch#187376"),
        patch=None,
        witness=_witness_frozen_mp_latched,
        invariants=("FS2-9",),
        known="fs2-frozen-mp-latched",
        note="The installed 2.13.0 has it: the witness shows ('None', 'None') latched after a frozen first forward "
        "(2.14.1's _init_mp_dtypes falls back to the floating parameters when none is trainable and gives fp32, "
        "fp32). Read from the source: 2.8.0 … 2.13.0 take the trainable parameters only and latch None when there "
        "are none; 2.4.1 … 2.7.1 read every parameter. Issue #186998 reports it; PR #187376 (in 2.14) falls "
        "back to the group's floating-point parameters.",
    ),
    RealBug(
        id="fs2-int-param-rejected",
        area="fsdp2",
        behaviour="fully_shard cannot shard a module holding an integer parameter (a frozen index): it raises "
        "RuntimeError 'Only Tensors of floating point and complex dtype can require gradients'.",
        had="2.3.1 … 2.11.0",
        fixed_in="2.12.1",
        upstream=("pytorch/pytorch#177844", "pytorch/pytorch#177948"),
        patch=_patch_int_param_rejected,
        witness=_witness_int_param_rejected,
        invariants=("FS2-12",),
        known="fs2-int-param-rejected",
        note="Read from the source: FSDPParam._init_sharded_param does `nn.Parameter(dtensor)` then "
        "`requires_grad_(param.requires_grad)` in 2.3.1 … 2.11.0; 2.12.1 passes requires_grad to nn.Parameter "
        "and also clamps param_dtype to None for non-floating parameters (init_dtype_attrs). Before 2.12 the cast "
        "of an integer parameter to param_dtype was never reached: sharding it failed first (measured on 2.4.1). "
        "No upstream issue or PR found (searched 'FSDP2 integer parameter', 'fully_shard int parameter "
        "requires_grad').",
    ),
    RealBug(
        id="fs2-grad-sync-recurse-ignored",
        area="fsdp2",
        behaviour="FSDPModule.set_requires_gradient_sync(flag, recurse=False) (and set_requires_all_reduce) set "
        "the flag on every FSDP module below too: recurse is ignored, so disabling sync on the root alone also "
        "stops its children's gradient reduction.",
        had="2.3.1",
        fixed_in="2.4.1",
        upstream=("pytorch/pytorch#124318",),
        patch=_patch_grad_sync_recurse_ignored,
        witness=_witness_grad_sync_recurse_ignored,
        invariants=("FS2-13",),
        note="Read from the source: 2.3.1 loops over `self.modules()` with `recurse` unused; 2.4.1 uses "
        "`[self]` when recurse is False (PR #124318, 'recurse arg was not being respected'). FS2-13 states how far "
        "turning reduction off reaches. One-rank gloo world.",
    ),
    RealBug(
        id="fs2-gloo-grads-summed",
        area="fsdp2_runtime",
        behaviour="On a gloo process group, fully_shard's sharded gradients come out summed over the ranks instead "
        "of averaged: world_size times the gradient of the mean loss, silently.",
        had="2.7.1 … 2.8.0",
        fixed_in="2.9.1",
        upstream=("pytorch/pytorch#162338",),
        patch=_patch_gloo_grads_summed,
        witness=_witness_gloo_grads_summed,
        invariants=("FS2-9",),
        known="fs2-gloo-grads-summed",
        note="Measured, not read: FSDP2's own files ask for ReduceOp.AVG (or divide) in every release, and the "
        "summing was gloo's answer to that request on 2.7.1 and 2.8.0 (the suite's known bug, seen on both, and "
        "its reproducer passes on 2.9.1 on). The patch makes FSDP2 ask a gloo group for a sum, which is what the "
        "ranks got.",
    ),
    RealBug(
        id="fs2-state-mapping-keeps-modules",
        area="fsdp2",
        behaviour="Every module fully_shard (or replicate) gave a state stays alive, with its parameters, after the "
        "caller drops the model: the composable-state mapping holds modules and states strongly, so `del model` "
        "frees no memory.",
        had="2.3.1 … 2.5.1",
        fixed_in="2.6.0",
        upstream=("pytorch/pytorch#139650",),
        patch=_patch_state_mapping_strong,
        witness=_witness_state_mapping_strong,
        invariants=("FS2-7",),
        known="fs2-state-mapping-keeps-modules",
        note="Read from the source: torch/distributed/_composable_state.py keeps `Dict[nn.Module, _State]` through "
        "2.5.1 and a WeakKeyDictionary of weak references from 2.6.0 (PR #139650: 'Without this, del model does "
        "not free memory of a module with FSDP2 applied'). The patch keeps a strong reference beside 2.13's weak "
        "mapping, which is what the old dict did.",
    ),
)
