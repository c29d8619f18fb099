"""Planted-bug splitting implementations of the compile around the split
(SPL-10, 11, 17..19): what each bucket's compile is handed (a submodule's
outputs, the captured graph's metadata and sources, the example inputs),
compiled lazily at a submodule's first call, in which grad mode, autocast
state and saved-tensors hooks, inside Dynamo's compile of a model, and with
which compiler configs.

Each is the reference with one behaviour broken, on the base class and the
``_impl`` wrapper of ``tests/planted/splitting.py``, which holds the plan's
bugs and the fixed-case table (``FIXED_CASE_TARGETS``, naming splitters of
both modules); ``tests/test_planted_split_cases.py`` runs them.
"""

from __future__ import annotations

import torch

from pytest_fsdpcheck.reference import splitting as ref
from tests.planted.splitting import PlantedSplitting, _impl

# What the backend is handed for each bucket broken, the plan and the split
# module's results right (SPL-10 alone sees it): the behaviours of torch's
# compile_submod and propagate_* bent one at a time.


def split_and_compile(gm, buckets, example_inputs, backend, *, wrap="single", meta=True, sources=True):
    """The reference's split and per-bucket compile, with what the backend
    gets bendable: ``wrap`` (``single``: a one-output submodule returns a
    one-element tuple, as the spec says; ``never``: it returns its value;
    ``always``: every output tuple is wrapped once more), ``meta`` (the
    graph module's ``meta`` and ``_param_name_to_source`` carried) and
    ``sources`` (the input placeholders' ``_dynamo_source`` carried). The
    split module unwraps what was wrapped, so its results stay right."""

    def prepare(gm, submod, _keep_metadata):
        saved = {n: getattr(n, "_dynamo_source", None) for n in submod.graph.nodes if n.op == "placeholder"}
        ref._carry_metadata(gm, submod)
        if not meta:
            submod.meta = {}
            del submod._param_name_to_source
        if not sources:
            for placeholder, source in saved.items():
                placeholder._dynamo_source = source
        output = next(n for n in submod.graph.nodes if n.op == "output")
        wrapped = wrap == "always" or (wrap == "single" and not isinstance(output.args[0], tuple))
        if wrapped:
            output.args = ((output.args[0],),)
            submod.recompile()
        return wrapped

    return ref._split_and_compile(gm, buckets, example_inputs, backend, prepare=prepare)


class _BackendGets(PlantedSplitting):
    handed: dict = {}

    def compile(self, gm, buckets, example_inputs, backend):
        if len(buckets) == 1:
            return backend(gm, list(example_inputs))
        return split_and_compile(gm, buckets, example_inputs, backend, **self.handed)


class _SingleOutputs(_BackendGets):  # SPL-10: a one-output submodule handed over returning its value, not a tuple
    handed = {"wrap": "never"}


class _DoubleWrapsTuples(_BackendGets):  # SPL-10: every output wrapped once more, a tuple of outputs included
    handed = {"wrap": "always"}


class _DropsGraphMetadata(_BackendGets):  # SPL-10: the submodules without the graph's meta and _param_name_to_source
    handed = {"meta": False}


class _DropsInputSources(_BackendGets):  # SPL-10: the submodules' input placeholders without their _dynamo_source
    handed = {"sources": False}


# The lazy mode (torch: DDPOptimizer's optimize_ddp_lazy_compile path): each
# splitter compiles at the split as the spec says, and with lazy_compile on
# defers each bucket's compile to its submodule's first call, getting what
# it hands over or unwraps wrong the way a bent copy of torch's lazy wrapper
# would. Only the lazy cases (test_lazy_split_cases) see them.


class _CompiledAtFirstCall(torch.nn.Module):
    """A bucket's submodule, handed to the backend on its first call with
    the values it gets then; ``unwrap``: it returns the one value of the
    tuple its compiled form returns."""

    def __init__(self, submod, backend, unwrap):
        super().__init__()
        self.submod, self.backend, self.unwrap = submod, backend, unwrap
        self.compiled = None

    def forward(self, *args):
        if self.compiled is None:
            self.compiled = self.backend(self.submod, list(args))
        out = self.compiled(*args)
        return out[0] if self.unwrap else out


def lazy_split(gm, buckets, backend, *, wrap="single", unwrap=True):
    """The split with every bucket's compile deferred to its first call;
    ``wrap`` as in :func:`split_and_compile`, ``unwrap=False``: what was
    wrapped is never unwrapped again."""
    from torch.fx.passes.split_module import split_module

    partition = {node: i for i, b in enumerate(buckets) for node in b.nodes}
    split_gm = split_module(gm, None, lambda node: partition[node])
    for node in split_gm.graph.nodes:
        if node.op != "call_module":
            continue
        submod = split_gm.get_submodule(node.target)
        ref._carry_metadata(gm, submod)
        output = next(n for n in submod.graph.nodes if n.op == "output")
        wrapped = wrap == "always" or (wrap == "single" and not isinstance(output.args[0], tuple))
        if wrapped:
            output.args = ((output.args[0],),)
            submod.recompile()
        setattr(split_gm, node.target, _CompiledAtFirstCall(submod, backend, wrapped and unwrap))
    split_gm.recompile()
    return split_gm


class _LazySplitting(PlantedSplitting):
    lazy_compile = True
    bent: dict = {}

    def split(self, gm, example_inputs, *, lazy_compile=False, **caps):
        self.lazily = lazy_compile
        return super().split(gm, example_inputs, **caps)

    def compile(self, gm, buckets, example_inputs, backend):
        if not self.lazily or len(buckets) == 1:
            return super().compile(gm, buckets, example_inputs, backend)
        return lazy_split(gm, buckets, backend, **self.bent)


class _LazyNeverWraps(_LazySplitting):  # SPL-10: lazily, a one-output submodule handed over returning its value
    bent = {"wrap": "never"}


class _LazyWrapsEveryOutput(_LazySplitting):  # SPL-10: lazily, every output wrapped once more, a tuple of outputs included
    bent = {"wrap": "always"}


class _LazyKeepsWrappedSingles(_LazySplitting):  # SPL-11: lazily, a one-output submodule's tuple passed on, not its value
    bent = {"unwrap": False}


# What each bucket's compile is handed, and the state it runs in, bent one
# at a time (the plan, the split module's results and SPL-10's shapes and
# dtypes right): SPL-17 sees the example inputs, SPL-18 the context.


def _noop_hook(value):
    return value


def bent_split_and_compile(gm, buckets, example_inputs, backend, *, hand=None, grad=True, mask_hooks=True, compile_in=None):
    """The reference's split and per-bucket compile: each bucket's submodule
    is run on real values to give the next its example inputs. Bendable:
    ``hand`` maps each value an earlier bucket computed before the backend
    gets it; ``grad=False`` propagates without grad (activations then do
    not require grad); ``mask_hooks=False`` lets the caller's saved-tensors
    hooks see the propagation; ``compile_in`` is a context manager factory
    each backend call runs in."""
    import contextlib

    from torch.fx.passes.split_module import split_module

    partition = {node: i for i, b in enumerate(buckets) for node in b.nodes}
    split_gm = split_module(gm, None, lambda node: partition[node])
    env: dict = {}
    computed: set = set()  # nodes whose values an earlier bucket computed
    placeholders = iter(example_inputs)
    hooks = torch.autograd.graph.saved_tensors_hooks(_noop_hook, _noop_hook) if mask_hooks else contextlib.nullcontext()
    with hooks, torch.set_grad_enabled(grad and torch.is_grad_enabled()):
        for node in split_gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(placeholders)
            elif node.op == "call_module":
                submod = split_gm.get_submodule(node.target)
                single = ref._prepare_submodule(gm, submod)
                args = torch.fx.node.map_arg(node.args, env.__getitem__)
                handed = [hand(v) if hand and n in computed and isinstance(v, torch.Tensor) else v
                          for n, v in zip(torch.fx.node.map_arg(node.args, lambda n: n), args, strict=True)]
                with compile_in() if compile_in else contextlib.nullcontext():
                    compiled = backend(submod, handed)
                env[node] = submod(*args)[0] if single else submod(*args)
                computed.add(node)
                setattr(split_gm, node.target, ref._wrapper_class()(compiled, single))
            elif node.op == "get_attr":
                env[node] = ref._fetch_attr(split_gm, node.target)
            elif node.op == "call_function":
                env[node] = node.target(*torch.fx.node.map_arg(node.args, env.__getitem__),
                                        **torch.fx.node.map_arg(node.kwargs, env.__getitem__))
                computed.add(node)  # getitem of a bucket's outputs
    split_gm.recompile()
    return split_gm


class _BentCompile(PlantedSplitting):
    bent: dict = {}

    def compile(self, gm, buckets, example_inputs, backend):
        if len(buckets) == 1:
            return backend(gm, list(example_inputs))
        return bent_split_and_compile(gm, buckets, example_inputs, backend, **self.bent)


def _contiguous_copy(value):
    return value.detach().contiguous().requires_grad_(value.requires_grad)


def _on_meta(value):
    return value.detach().to("meta").requires_grad_(value.requires_grad)


def _cpu_autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


class _ContiguousExampleInputs(_BentCompile):  # SPL-17: activations handed over as contiguous copies (strides lost)
    bent = {"hand": _contiguous_copy}


class _GradlessExampleInputs(_BentCompile):  # SPL-17: propagated without grad, activations not requiring grad
    bent = {"grad": False}


class _MetaExampleInputs(_BentCompile):  # SPL-17: activations handed over on the meta device
    bent = {"hand": _on_meta}


class _HooksSeeCompile(_BentCompile):  # SPL-18: the caller's saved-tensors hooks see the propagation
    bent = {"mask_hooks": False}


class _CompilesWithoutGrad(_BentCompile):  # SPL-18: each backend call made under no_grad
    bent = {"compile_in": torch.no_grad}


class _CompilesUnderAutocast(_BentCompile):  # SPL-18: each backend call made under CPU autocast
    bent = {"compile_in": _cpu_autocast}


class _RealValuesInsideCompile(_BentCompile):  # SPL-17: real values propagated inside Dynamo's compile, as outside
    bent = {}


class _OwnFakeMode(_BentCompile):  # SPL-17: inside Dynamo's compile, activations as fakes of a fake mode of its own
    def compile(self, gm, buckets, example_inputs, backend):
        from torch._subclasses.fake_tensor import FakeTensorMode

        own = FakeTensorMode(allow_non_fake_inputs=True)

        def hand(value):
            return own.from_tensor(value)

        if len(buckets) == 1:
            return backend(gm, list(example_inputs))
        return bent_split_and_compile(gm, buckets, example_inputs, backend, hand=hand)


class _SpecializesSizes(PlantedSplitting):  # SPL-10: reads each symbolic size as a number, so Dynamo recompiles per length
    def compile(self, gm, buckets, example_inputs, backend):
        for value in example_inputs:
            if isinstance(value, torch.SymInt):
                int(value)  # a guard on the size's value: the graph holds for this length only
        if len(buckets) == 1:
            return backend(gm, list(example_inputs))
        return ref._split_and_compile(gm, buckets, example_inputs, backend)


class _LastBucketMetadata(PlantedSplitting):  # SPL-10: every lazily compiled backward against the last bucket's forward metadata
    def compile(self, gm, buckets, example_inputs, backend):
        if len(buckets) == 1:
            return backend(gm, list(example_inputs))
        return ref._split_and_compile(gm, buckets, example_inputs, backend, pair_backwards=False)


class _ConfigsToOneBucketOnly(PlantedSplitting):  # SPL-19: compiler configs reach an unsplit graph's compile, no bucket's
    compiler_configs = True

    def split(self, gm, example_inputs, *, compiler_configs=None, **caps):
        self.configs = compiler_configs or {}
        return super().split(gm, example_inputs, **caps)

    def compile(self, gm, buckets, example_inputs, backend):
        if len(buckets) == 1:
            return backend(gm, list(example_inputs), **self.configs)
        return ref._split_and_compile(gm, buckets, example_inputs, backend)


SingleOutputs = _impl(_SingleOutputs)
DoubleWrapsTuples = _impl(_DoubleWrapsTuples)
DropsGraphMetadata = _impl(_DropsGraphMetadata)
DropsInputSources = _impl(_DropsInputSources)
ConfigsToOneBucketOnly = _impl(_ConfigsToOneBucketOnly)
ContiguousExampleInputs = _impl(_ContiguousExampleInputs)
GradlessExampleInputs = _impl(_GradlessExampleInputs)
MetaExampleInputs = _impl(_MetaExampleInputs)
HooksSeeCompile = _impl(_HooksSeeCompile)
CompilesWithoutGrad = _impl(_CompilesWithoutGrad)
CompilesUnderAutocast = _impl(_CompilesUnderAutocast)
RealValuesInsideCompile = _impl(_RealValuesInsideCompile)
OwnFakeMode = _impl(_OwnFakeMode)
SpecializesSizes = _impl(_SpecializesSizes)
LastBucketMetadata = _impl(_LastBucketMetadata)
LazyNeverWraps = _impl(_LazyNeverWraps)
LazyWrapsEveryOutput = _impl(_LazyWrapsEveryOutput)
LazyKeepsWrappedSingles = _impl(_LazyKeepsWrappedSingles)

#: planted implementation name -> the invariant test_higher_order_inside_compile_cases fails it on
#: (HopCrash and RejectsHops are splitting.py's)
HOP_COMPILE_TARGETS = {"HopCrash": "SPL-14", "RejectsHops": "SPL-14", "RealValuesInsideCompile": "SPL-14"}

#: planted implementation name -> the invariant test_lazy_split_cases fails it on
#: (each passes the cases compiled at the split)
LAZY_CASE_TARGETS = {"LazyNeverWraps": "SPL-10", "LazyWrapsEveryOutput": "SPL-10", "LazyKeepsWrappedSingles": "SPL-11"}

#: planted implementation name -> the invariant test_compile_context_cases fails it on
CONTEXT_CASE_TARGETS = {"CompilesWithoutGrad": "SPL-18", "CompilesUnderAutocast": "SPL-18"}

#: planted implementation name -> the invariant test_compile_hooks_cases fails it on
HOOK_CASE_TARGETS = {"HooksSeeCompile": "SPL-18"}

#: planted implementation name -> the invariant test_split_inside_compile_cases fails it on (each passes
#: every case compiled outside Dynamo: the reference's propagation before SPL-17 looked inside it)
DYNAMIC_CASE_TARGETS = {"RealValuesInsideCompile": "SPL-17", "OwnFakeMode": "SPL-17", "SpecializesSizes": "SPL-10",
                        "LastBucketMetadata": "SPL-10"}

#: planted implementation name -> the invariant test_compiler_configs_cases fails it on
CONFIG_CASE_TARGETS = {"ConfigsToOneBucketOnly": "SPL-19"}
