"""The controls' mixed precision, as FSDP2 gives it to a group's modules and
nothing of FSDP2 run: parameters swapped for leaves of the compute dtype for
a whole step, and floating inputs (and outputs) cast at the group's roots.
Shared by the users'-plan control (``plan_run``) and FS2-9's mixed step
(``fsdp2_run``), so the two controls cannot drift apart."""

from __future__ import annotations

import torch


def swap_in_leaves(model, leaf_of: dict) -> None:
    """Every module's own parameter whose ``id`` is in ``leaf_of`` replaced
    by its leaf, in every module holding it (a tied parameter becomes one
    leaf wherever it is held); ``model`` is the control's own copy."""
    if not leaf_of:
        return
    for module in model.modules():
        for key, param in list(module._parameters.items()):
            if param is not None and id(param) in leaf_of:
                module._parameters[key] = leaf_of[id(param)]


def low_leaf(param, dtype) -> torch.nn.Parameter:
    """A parameter's leaf in ``dtype`` for the step, trainable as it was."""
    return torch.nn.Parameter(param.detach().to(dtype), requires_grad=param.requires_grad)


def cast_floating(dtype, obj):
    """Floating tensors in ``obj`` (through tuples, named tuples, lists and
    dicts) cast to ``dtype``; anything else as it is."""
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() and obj.dtype != dtype else obj
    if isinstance(obj, (tuple, list)):
        if hasattr(obj, "_fields"):
            return type(obj)(*(cast_floating(dtype, x) for x in obj))
        return type(obj)(cast_floating(dtype, x) for x in obj)
    if isinstance(obj, dict):
        return {k: cast_floating(dtype, v) for k, v in obj.items()}
    return obj


def cast_inputs_hook(module, dtype):
    """FSDP2's ``cast_forward_inputs`` at a group's root: its floating
    positional and keyword inputs cast to ``dtype`` at every call."""
    return module.register_forward_pre_hook(
        lambda m, args, kwargs: (cast_floating(dtype, args), cast_floating(dtype, kwargs)), with_kwargs=True)


def cast_outputs_hook(module, dtype):
    """FSDP2's ``output_dtype`` at a group's root."""
    return module.register_forward_hook(lambda m, args, out: cast_floating(dtype, out))
