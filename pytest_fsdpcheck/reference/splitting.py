"""Reference DDPOptimizer (seed ``003_*``, DESIGN.md SPL-1..14, 17..19).

Walks the graph once from the last node back. Each trainable, non-ignored
parameter is counted once, at the latest node that reads it (the point where
its gradient is complete in backward). A bucket closes before the next node as
soon as it has reached its cap (the first-bucket cap for the bucket holding
the graph's last nodes) and one of its nodes is used outside it; until it has
such an output it keeps absorbing nodes, and records how many. A
``get_attr`` node is no such output: split_module keeps it in the parent
graph and passes its value to every submodule that reads it, so a bucket
whose only outward node is a ``get_attr`` would be a submodule with no
output. A parameter-free earliest bucket (no bytes: a zero-element
parameter weighs none) is fused into the next one, with whatever
parameters it lists.

Whether a bucket has an external output is tracked incrementally: nodes join
a bucket in reverse graph order and a node's users all come after it, so once
a node has a user outside the bucket it keeps it. The whole plan is linear in
nodes plus edges.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from ..contract import BucketInfo, SplitResult

DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024  # DDP's first-bucket default (c10d)


@dataclass
class _Bucket:
    nodes: list = field(default_factory=list)  # reverse graph order while planning
    size: int = 0
    params: list = field(default_factory=list)
    param_ids: list = field(default_factory=list)
    has_external_output: bool = False
    extra_ops: int = 0
    size_before_extension: int = 0


def _is_counted(tensor) -> bool:
    import torch

    return (
        isinstance(tensor, torch.nn.Parameter)
        and tensor.requires_grad
        and not getattr(tensor, "_ddp_ignored", False)
    )


def _node_params(gm, node, real=None, method_args="all"):
    """``(name, parameter)`` read by ``node``: a called module's parameters,
    a ``get_attr`` parameter, or parameters passed as placeholder arguments.
    ``real`` maps placeholders to the real example inputs: in a captured
    Dynamo graph ``example_value`` is a fake that has lost ``_ddp_ignored``."""
    import torch

    if node.op == "call_method" and method_args == "string_receiver_only":
        receiver = node.args[0] if node.args else None
        if not isinstance(getattr(receiver, "target", None), str):
            return []
    if node.op == "call_module":
        return [(f"{node.target}.{n}", p) for n, p in gm.get_submodule(node.target).named_parameters()]
    if node.op == "get_attr":
        value = _fetch_attr(gm, node.target)
        return [(node.target, value)] if isinstance(value, torch.Tensor) else []
    if node.op == "call_method" and node.args and getattr(node.args[0], "op", None) == "get_attr":
        # ``self.lin.forward(h)`` in module form: the module read by get_attr,
        # its parameters used where it is called
        receiver = _fetch_attr(gm, node.args[0].target)
        if isinstance(receiver, torch.nn.Module):
            return [(f"{node.args[0].target}.{n}", p) for n, p in receiver.named_parameters()]
    if node.op in ("call_function", "call_method"):
        found = []
        for arg in (*node.args, *node.kwargs.values()):
            if isinstance(arg, torch.fx.Node) and arg.op == "placeholder":
                value = (real or {}).get(arg, arg.meta.get("example_value"))
                if isinstance(value, torch.Tensor):
                    found.append((str(arg.target), value))
        return found
    return []


def _receiver_module_params(gm, node, counted) -> list:
    """torch >= 2.4: a call_method whose receiver's target names a submodule
    counts that module's parameters (once per module, like call_module)."""
    receiver = node.args[0] if node.args else None
    target = getattr(receiver, "target", None)
    if not isinstance(target, str):
        return []
    try:
        module = gm.get_submodule(target)
    except AttributeError:
        return []
    if id(module) in counted:
        return []
    counted.add(id(module))
    return [(f"{node.target}.{n}", p) for n, p in module.named_parameters()]


def _fetch_attr(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def plan(
    gm,
    bucket_bytes_cap: int,
    first_bucket_cap: int,
    example_inputs=(),
    *,
    count_each_param: str = "once",
    method_args: str = "all",
    ddp_ignored_from: str = "real_inputs",
    close_at_cap: str = "with_output",
    method_receiver: str = "ignored",
    attr_outputs: str = "not_counted",
    zero_byte_preamble: str = "fused",
    get_attr_modules: str = "called",
) -> list[_Bucket]:
    """The buckets in graph order, each with its nodes in graph order.

    The keyword switches model known torch bugs (see ``pytest_fsdpcheck.known``):
    ``count_each_param="per_use"`` counts a parameter at every node that reads
    it, de-duplicating only called modules; ``method_args="string_receiver_only"``
    skips a ``call_method``'s parameter arguments unless its receiver's target is
    a string; ``ddp_ignored_from="example_value"`` reads ``_ddp_ignored`` off the
    placeholders' (possibly fake) example values; ``count_each_param="per_node"``
    de-duplicates nothing, called modules included; ``close_at_cap="always"``
    closes a full bucket whether or not it has an external output;
    ``method_receiver="module_counted"`` counts, at a ``call_method`` node, the
    parameters of the module its receiver's string target names (a called
    module's output, in module-form graphs), once per module;
    ``bucket_fake_run="plain"`` runs a bucket on its fakes inside Dynamo's compile
    with the python dispatcher as the caller left it (torch 2.8's DDPOptimizer:
    off there, so a view by symbolic sizes raises);
    ``zero_byte_preamble="asserted"`` raises torch's ``AssertionError`` where
    the earliest bucket, to be fused, lists a parameter (of zero elements);
    ``get_attr_modules="requires_grad_read"`` reads ``requires_grad`` off
    every ``get_attr`` target that is not a graph module, as torch < 2.4
    did, raising its ``AttributeError`` on a module read that way.
    """
    if get_attr_modules == "requires_grad_read":
        import torch

        for node in gm.graph.nodes:
            if node.op == "get_attr":
                value = _fetch_attr(gm, node.target)
                if not isinstance(value, (torch.Tensor, torch.fx.GraphModule)):
                    raise AttributeError(f"'{type(value).__name__}' object has no attribute 'requires_grad'")
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    real = dict(zip(placeholders, example_inputs, strict=False)) if ddp_ignored_from == "real_inputs" else {}
    per_use = count_each_param in ("per_use", "per_node")
    dedupe_modules = count_each_param == "per_use"
    buckets = [_Bucket()]  # buckets[-1] is the one being filled
    bucket_index: dict = {}
    counted: set = set()  # parameter ids; module ids under per_use
    for node in reversed(gm.graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        current = buckets[-1]
        cap = first_bucket_cap if len(buckets) == 1 else bucket_bytes_cap
        if current.size >= cap:
            if current.has_external_output or close_at_cap == "always":
                current = _Bucket()
                buckets.append(current)
            else:
                if current.extra_ops == 0:
                    current.size_before_extension = current.size
                current.extra_ops += 1
        if dedupe_modules and node.op == "call_module":
            module = gm.get_submodule(node.target)
            reads = [] if id(module) in counted else _node_params(gm, node, real, method_args)
            counted.add(id(module))
        else:
            reads = _node_params(gm, node, real, method_args)
        if method_receiver == "module_counted" and node.op == "call_method":
            reads = _receiver_module_params(gm, node, counted) + reads
        for name, param in reads:
            if _is_counted(param) and (per_use or id(param) not in counted):
                counted.add(id(param))
                current.size += param.untyped_storage().nbytes()
                current.params.append(name)
                current.param_ids.append(id(param))
        here = len(buckets) - 1
        bucket_index[node] = here
        if not current.has_external_output and (node.op != "get_attr" or attr_outputs == "counted"):
            current.has_external_output = any(bucket_index.get(user) != here for user in node.users)
        current.nodes.append(node)
    if len(buckets) > 1 and buckets[-1].size == 0:
        preamble = buckets.pop()
        if preamble.params and zero_byte_preamble == "asserted":
            raise AssertionError("Params should be empty if size is 0")
        buckets[-1].nodes.extend(preamble.nodes)
        # a zero-element parameter read there is still read there (SPL-3)
        buckets[-1].params.extend(preamble.params)
        buckets[-1].param_ids.extend(preamble.param_ids)
    buckets.reverse()
    for bucket in buckets:
        bucket.nodes.reverse()
    return buckets


def table_lines(buckets: list[_Bucket], bucket_bytes_cap: int) -> list[str]:
    """The bucket table, numbered like DDP (0 = the bucket with the graph's
    last nodes); rows are ``index | size | name`` with blank index and size
    for a bucket's further parameters."""
    numbered = list(enumerate(reversed(buckets)))
    rows = []
    for index, bucket in numbered:
        for i, name in enumerate(bucket.params):
            rows.append(f"{index} | {bucket.size} | {name}" if i == 0 else f" |  | {name}")
    if not rows:
        return ["DDPOptimizer captured no parameters and did not split this graph."]
    lines = [
        f"DDPOptimizer used bucket cap {bucket_bytes_cap} and created {len(buckets)} buckets.",
        "DDPOptimizer produced the following bucket assignments:",
        "Index | Size (b) | Param Names",
        *rows,
    ]
    extended = [(i, b) for i, b in numbered if b.extra_ops]
    if extended:
        lines.insert(1, "Some buckets were extended beyond their requested parameter capacities "
                        "to give each subgraph an output node.")
        lines.append("DDPOptimizer extended these buckets to ensure per-subgraph output nodes:")
        lines.append("Index | Extra Ops | Extra Param Size (b)")
        lines += [f"{i} | {b.extra_ops} | {b.size - b.size_before_extension}" for i, b in extended]
    return lines


_SWITCHES = {
    "count_each_param": ("once", "per_use", "per_node"),
    "close_at_cap": ("with_output", "always"),
    "method_receiver": ("ignored", "module_counted"),
    "method_args": ("all", "string_receiver_only"),
    "ddp_ignored_from": ("real_inputs", "example_value"),
    "attr_outputs": ("not_counted", "counted"),
    "submodule_metadata": ("propagated", "dropped", "every_child"),
    "zero_byte_preamble": ("fused", "asserted"),
    "get_attr_modules": ("called", "requires_grad_read"),
    "module_attr_meta": ("hidden", "seen"),
    "fw_metadata": ("paired", "last_bucket"),
    "bucket_fake_run": ("python_dispatcher", "plain"),
}


class ReferenceSplitting:
    graph_form = "dynamo"
    graph_forms = ("dynamo", "module")  # call_module/get_attr graphs are planned the same way
    # Asked to compile lazily, the reference still compiles at the split: the
    # spec asks of a lazy split only that, after the split module's first
    # call, the backend calls and the results be those of an eager one.
    lazy_compile = True
    compiler_configs = True  # handed on to every backend call (SPL-19)

    def __init__(self, **switches):
        for name, value in switches.items():
            if value not in _SWITCHES.get(name, ()):
                raise ValueError(f"unknown splitting switch {name}={value!r}; known: {_SWITCHES}")
        self._switches = switches

    def split(self, gm, example_inputs, *, bucket_bytes_cap, first_bucket_cap, backend, lazy_compile=False,
              compiler_configs=None):
        if compiler_configs:
            backend = functools.partial(backend, **compiler_configs)
        if first_bucket_cap is None:
            first_bucket_cap = DEFAULT_FIRST_BUCKET_BYTES
        if first_bucket_cap > bucket_bytes_cap:
            raise ValueError(
                f"first_bucket_cap ({first_bucket_cap}) must not exceed bucket_bytes_cap "
                f"({bucket_bytes_cap}): the first bucket is the small one that warms up communication"
            )
        planning = {k: v for k, v in self._switches.items()
                    if k not in ("submodule_metadata", "module_attr_meta", "fw_metadata", "bucket_fake_run")}
        buckets = plan(gm, bucket_bytes_cap, first_bucket_cap, example_inputs, **planning)
        infos = [
            BucketInfo(
                nodes=[n.name for n in b.nodes],
                size=b.size,
                params=list(b.params),
                param_ids=list(b.param_ids),
                extra_ops=b.extra_ops,
                extra_bytes=b.size - b.size_before_extension if b.extra_ops else 0,
            )
            for b in buckets
        ]
        table = table_lines(buckets, bucket_bytes_cap)
        if len(buckets) == 1:
            return SplitResult(infos, backend(gm, list(example_inputs)), table)
        # torch's DDPOptimizer copies every submodule to fake tensors before
        # compiling it, and fx's Graph copy fails on a submodule without an
        # output on some releases: the switch that makes such submodules
        # copies them as torch does, so it fails where torch fails.
        copy_first = self._switches.get("attr_outputs") == "counted"
        metadata = self._switches.get("submodule_metadata", "propagated")
        split_gm = _split_and_compile(gm, buckets, example_inputs, backend, copy_first, metadata != "dropped",
                                      hide_module_meta=self._switches.get("module_attr_meta", "hidden") == "hidden",
                                      pair_backwards=self._switches.get("fw_metadata", "paired") == "paired",
                                      python_dispatcher=self._switches.get("bucket_fake_run",
                                                                           "python_dispatcher") == "python_dispatcher")
        if metadata == "every_child":
            # torch 2.8-2.12: the captured graph's metadata onto every child
            # graph module of the split module, a higher-order op's hoisted
            # body too (its own meta lost)
            import torch

            for child in split_gm.children():
                if isinstance(child, torch.fx.GraphModule):  # the partitions are compiled wrappers by now
                    child.meta = dict(getattr(gm, "meta", {}))
        return SplitResult(infos, split_gm, table)


def _prepare_submodule(gm, submod, keep_metadata=True) -> bool:
    """What the backend gets for one bucket: the captured graph's metadata
    and a tuple output; whether a single value was wrapped."""
    if keep_metadata:
        _carry_metadata(gm, submod)
    return _return_tuple(submod)


def _split_and_compile(gm, buckets, example_inputs, backend, copy_first=False, keep_metadata=True,
                       prepare=_prepare_submodule, hide_module_meta=True, pair_backwards=True, python_dispatcher=True):
    import torch
    from torch.fx.passes.split_module import split_module

    partition = {node: i for i, b in enumerate(buckets) for node in b.nodes}
    # A get_attr of a module (``self.lin.forward(h)`` in module form) carries
    # the module as its example value; split_module reads the free symbols of
    # every value a partition hands on and cannot read a module's, so it is
    # out of sight while split_module runs (the get_attr stays in the parent
    # graph, and the submodule calling it reads the module itself).
    hidden = {}
    if hide_module_meta:
        for node in gm.graph.nodes:
            value = node.meta.get("example_value") if node.op == "get_attr" else None
            if isinstance(value, torch.nn.Module):
                hidden[node] = node.meta.pop("example_value")
    try:
        split_gm = split_module(gm, None, lambda node: partition[node])
    finally:
        for node, value in hidden.items():
            node.meta["example_value"] = value

    # The values that give the backend each submodule's example inputs are
    # the caller's (real, outside a compile) or, inside Dynamo's compile,
    # fakes of its fake mode, so that a size it made symbolic stays the same
    # symbol for every bucket (SPL-17). The graphs run here mutate only their
    # own intermediates. They run in the caller's grad mode, so each
    # activation requires grad as it will at run time (SPL-17), and the
    # backend compiles in that mode (SPL-18); a pair of do-nothing
    # saved-tensors hooks, innermost, keeps any the caller has active from
    # seeing these runs (SPL-18).
    fake = _tracing_fake(example_inputs)
    env: dict = {}
    placeholders = iter(example_inputs)
    with torch.autograd.graph.saved_tensors_hooks(_keep, _keep):
        for node in split_gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = fake.value(next(placeholders))
            elif node.op == "call_module":
                submod = split_gm.get_submodule(node.target)
                if copy_first and not node.users:
                    _copy_like_ddp_optimizer(submod, node)
                single = prepare(gm, submod, keep_metadata)
                args = torch.fx.node.map_arg(node.args, env.__getitem__)
                compiled = backend(submod, list(args))
                out = fake.run(submod, args, python_dispatcher)
                env[node] = out[0] if single else out
                wrapper = _wrapper_class()(compiled, single)
                if pair_backwards:
                    wrapper.pair_backward(*fake.forward_metadata())
                setattr(split_gm, node.target, wrapper)
            elif node.op == "get_attr":
                env[node] = fake.attribute(_fetch_attr(split_gm, node.target))
            elif node.op == "call_function":
                args = torch.fx.node.map_arg(node.args, env.__getitem__)
                kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
                with fake.mode():
                    env[node] = node.target(*args, **kwargs)
    split_gm.recompile()
    return split_gm


def _keep(value):
    return value


class _Real:
    """Example values outside a compile: the caller's own."""

    def value(self, v):
        return v

    def attribute(self, v):
        return v

    def run(self, submod, args, python_dispatcher=True):
        return submod(*args)

    def mode(self):
        import contextlib

        return contextlib.nullcontext()

    def forward_metadata(self):
        return None, None


class _InFakeMode:
    """Example values inside Dynamo's compile: every tensor as a fake of the
    compile's fake mode. Converting the same real tensor again gives the fake
    Dynamo made of it (the mode keeps them), symbolic sizes and all; a
    submodule runs on fakes of its own tensors."""

    def __init__(self, fake_mode, context=None):
        self._fake_mode = fake_mode
        self._context = context
        self._last_metadata = getattr(context, "fw_metadata", None)

    def value(self, v, static=False):
        """``v`` as a fake of the mode: the fake Dynamo made of an input, or
        with ``static`` (a module's own tensors, which Dynamo did not make
        symbolic) one of fixed sizes."""
        import torch
        from torch._subclasses.fake_tensor import FakeTensor

        if not isinstance(v, torch.Tensor) or isinstance(v, FakeTensor):
            return v
        fake = self._fake_mode.from_tensor(v, static_shapes=True) if static else self._fake_mode.from_tensor(v)
        return torch.nn.Parameter(fake, v.requires_grad) if isinstance(v, torch.nn.Parameter) else fake

    def attribute(self, v):
        return self.value(v, static=True)

    def run(self, submod, args, python_dispatcher=True):
        """``submod`` on fakes of its own tensors and ``args``, with the
        python dispatcher on (``python_dispatcher``): a bucket that views
        by symbolic sizes needs the python meta kernels, and Dynamo calls
        its backend with the dispatcher off on some releases (2.8), so the
        fake run turns it on itself rather than inherit the caller's."""
        import copy

        import torch

        # a copy whose every tensor attribute is its fake: a fake mode takes
        # no real tensors
        memo: dict = {}
        for owner in submod.modules():
            for t in (*owner._parameters.values(), *owner._buffers.values(),
                      *(v for v in vars(owner).values() if isinstance(v, torch.Tensor))):
                if t is not None and id(t) not in memo:
                    memo[id(t)] = self.attribute(t)
        copied = copy.deepcopy(submod, memo)
        if python_dispatcher:
            from torch._dispatch.python import enable_python_dispatcher

            dispatcher = enable_python_dispatcher()
        else:
            dispatcher = _ConcreteSizesOnly()
        with self._fake_mode, dispatcher:
            return copied(*args)

    def mode(self):
        return self._fake_mode

    def forward_metadata(self):
        """``(context, metadata)``: the forward metadata an AOTAutograd
        backend left on the compile's TracingContext for the bucket just
        compiled, where it is new; ``(None, None)`` otherwise."""
        meta = getattr(self._context, "fw_metadata", None)
        if meta is None or meta is self._last_metadata:
            return None, None
        self._last_metadata = meta
        return self._context, meta


def _ConcreteSizesOnly():
    """A dispatch mode in which a view by symbolic sizes raises as torch
    2.8's C++ meta kernel does without the python dispatcher (the
    ``bucket_fake_run="plain"`` switch: DDPOptimizer's fake run of a bucket
    on that release); other releases' kernels take the sizes either way."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    views = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default}

    class ConcreteSizesOnly(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            sizes = args[1] if func in views and len(args) > 1 else ()
            out = func(*args, **(kwargs or {}))  # 2.8's own meta kernel raises here, in its own words
            if any(isinstance(size, torch.SymInt) and not size.node.is_constant() for size in sizes):
                raise RuntimeError("SymIntArrayRef expected to contain only concrete integers")
            return out

    return ConcreteSizesOnly()


def _tracing_fake(example_inputs):
    """Fakes of the enclosing compile's fake mode where there is one (the
    TracingContext Dynamo sets up around its backend) and an example input
    is real; the caller's values otherwise."""
    import torch

    context_type = getattr(torch._guards, "TracingContext", None)
    try_get = getattr(context_type, "try_get", None)  # torch >= 2.2
    if try_get is None:
        try_get = getattr(context_type, "get", lambda: None)  # torch 2.0, 2.1: None outside a compile
    context = try_get()
    fake_mode = getattr(context, "fake_mode", None)
    if fake_mode is None:
        return _Real()
    return _InFakeMode(fake_mode, context)


def _carry_metadata(gm, submod):
    """What a backend reads off the graph Dynamo captured, onto a bucket's
    submodule: the graph module's ``meta`` and ``_param_name_to_source``,
    and each input placeholder's ``_dynamo_source`` (split_module names a
    submodule's placeholders after the values they take; one taking an
    earlier bucket's value has no source)."""
    submod.meta = dict(getattr(gm, "meta", {}))
    if hasattr(gm, "_param_name_to_source"):
        submod._param_name_to_source = dict(gm._param_name_to_source)
    sources = {n.name: getattr(n, "_dynamo_source", None) for n in gm.graph.nodes if n.op == "placeholder"}
    for node in submod.graph.nodes:
        if node.op == "placeholder":
            node._dynamo_source = sources.get(node.name)


def _return_tuple(submod) -> bool:
    """Make ``submod`` return a tuple, as AOTAutograd-based backends need;
    whether it returned a single value (which the split module unwraps)."""
    output = next(n for n in submod.graph.nodes if n.op == "output")
    if isinstance(output.args[0], (tuple, list)):
        return False
    output.args = ((output.args[0],),)
    submod.recompile()
    return True


def _copy_like_ddp_optimizer(submod, node):
    """Deep-copy ``submod`` as DDPOptimizer's fake-tensor pass does, failing
    the way its fx interpreter reports a node's error (the node first)."""
    import copy

    try:
        copy.deepcopy(submod)
    except Exception as exc:
        where = f"While executing {node.format_node()}"
        exc.args = (f"{exc.args[0]}\n\n{where}" if exc.args else where, *exc.args[1:])
        raise


@functools.cache
def _wrapper_class():
    import torch

    class CompiledSubmodule(torch.nn.Module):
        """Holds a backend's compiled callable in place of a split submodule."""

        def __init__(self, fn, single):
            super().__init__()
            self.fn = fn
            self.single = single  # the submodule was given a one-element tuple to return
            self.context = self.metadata = None

        def pair_backward(self, context, metadata):
            """An AOTAutograd backend compiles a bucket's backward lazily, at
            the first backward, against the forward metadata it finds on the
            compile's TracingContext: put this bucket's there as the backward
            reaches it (it is the last bucket's by then)."""
            self.context, self.metadata = context, metadata

        def forward(self, *args):
            out = self.fn(*args)
            if self.metadata is not None:
                values = tuple(out) if isinstance(out, (tuple, list)) else (out,)
                paired = _metadata_restorer().apply(self.context, self.metadata, *values)
                out = type(out)(paired) if isinstance(out, (tuple, list)) else paired[0]
            return out[0] if self.single else out

    return CompiledSubmodule


@functools.cache
def _metadata_restorer():
    import torch

    class RestoreForwardMetadata(torch.autograd.Function):
        """The identity; on the way back, before the gradients reach the
        bucket whose outputs these are, its forward metadata onto the
        TracingContext its backward compile reads."""

        @staticmethod
        def forward(ctx, context, metadata, *outputs):
            ctx.tracing_context, ctx.forward_metadata = context, metadata
            return tuple(o.view_as(o) if isinstance(o, torch.Tensor) else o for o in outputs)

        @staticmethod
        def backward(ctx, *grads):
            ctx.tracing_context.fw_metadata = ctx.forward_metadata
            return (None, None, *grads)

    return RestoreForwardMetadata
