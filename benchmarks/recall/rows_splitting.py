"""Real bugs of torch's DDPOptimizer (``torch/_dynamo/backends/distributed.py``),
read from the released wheels' source 2.0.1 … 2.15.0 (latest patch of each
minor; 2.13.0, 2.14.1 and 2.15.0 ship the same file). The survey beside this
file (``survey_splitting.md``) lists every change of that file per release
pair and why the others are not rows.

Each patch puts one old behaviour back into the installed torch by replacing
or wrapping one small piece of the module (a helper, a method, or a wrapper
around ``compile_fn``/``SubmodCompiler``); nothing is copied from the old
sources. The witnesses call ``DDPOptimizer.compile_fn`` on small hand-built
``fx`` graphs, or compile a three-layer model through Dynamo with a custom
backend that hands the graph to ``DDPOptimizer`` (two rows need Dynamo's
``TracingContext``).
"""

from __future__ import annotations

import importlib
import operator

from benchmarks.recall.row import RealBug

_DIST = "torch._dynamo.backends.distributed"


def _dist():
    return importlib.import_module(_DIST)


# ----------------------------------------------------------------- helpers


def _graph(build, root=None):
    """A GraphModule over ``root`` (a module with Linear(4, 4)s ``lin1``,
    ``lin2``, ``lin3``) whose graph ``build(graph)`` writes, carrying the
    attributes compile_fn reads of a captured graph (empty)."""
    import torch.fx as fx
    import torch.nn as nn

    if root is None:
        root = nn.Module()
        for name in ("lin1", "lin2", "lin3"):
            setattr(root, name, nn.Linear(4, 4))
    graph = fx.Graph()
    build(graph)
    gm = fx.GraphModule(root, graph)
    # what compile_fn reads of a graph Dynamo captured: each placeholder's
    # example value and source, the graph's parameter sources
    for node in gm.graph.find_nodes(op="placeholder"):
        node.meta.setdefault("example_value", None)
        node._dynamo_source = None
    gm._param_name_to_source = {}
    return gm


def _recording_backend(calls):
    def backend(gm, example_inputs, **configs):
        calls.append((gm, list(example_inputs), dict(configs)))
        return gm.forward

    return backend


def _optimizer(backend, cap):
    return _dist().DDPOptimizer(bucket_bytes_cap=cap, backend_compile_fn=backend, first_bucket_cap=cap)


def _plan(opt):
    """The buckets in graph order: each bucket's node names in graph order."""
    return tuple(tuple(n.name for n in reversed(b.nodes)) for b in opt.buckets)


def _x():
    import torch

    return torch.randn(2, 4)


# ------------------------------------------- 2.0: bucket closes at its cap


def _patch_close_without_output(mp) -> None:
    """torch 2.0.1 starts a new bucket as soon as the current one reaches its
    cap; 2.1 first asks ``bucket_has_external_output`` and extends the bucket
    otherwise. Answering "yes" always is 2.0's rule."""
    mp.setattr(_dist(), "bucket_has_external_output", lambda bucket: True)


def _witness_close_without_output():
    """x -> lin1 -> lin2 (returned), and lin3 on lin1's output whose result
    nothing uses (the last node, as an in-place-only tail would be). Cap one
    byte: the plan, and how the split went."""

    def build(g):
        x = g.placeholder("x")
        h = g.call_module("lin1", (x,))
        y = g.call_module("lin2", (h,))
        g.call_module("lin3", (h,))
        g.output(y)

    calls = []
    opt = _optimizer(_recording_backend(calls), 1)
    try:
        opt.compile_fn(_graph(build), [_x()])
        outcome = "split"
    except Exception as exc:  # the old rule can leave split_module a partition without outputs
        outcome = type(exc).__name__
    outputs = tuple(
        sum(1 for n in gm.graph.nodes if n.op == "output" and n.args and n.args[0] != ()) for gm, _, _ in calls
    )
    return _plan(opt), outcome, outputs


# -------------------------------- < 2.4: a parameter counted at every node


def _patch_counted_per_node(mp) -> None:
    """Before 2.4, compile_fn added a called module's parameters at every
    call_module node (no ``processed_modules``): a module called twice counts
    twice. Not recording the module as processed restores that."""
    dist = _dist()

    def add_module_params_to_bucket(self, mod, bucket, processed_modules, prefix):
        for name, param in mod.named_parameters():
            if param.requires_grad and not self._ignore_parameter(param):
                self.add_param(bucket, param, f"{prefix}_{name}")

    mp.setattr(dist.DDPOptimizer, "add_module_params_to_bucket", add_module_params_to_bucket)


def _witness_counted_per_node():
    """lin1 called twice (x -> lin1 -> lin1), one bucket: its size in bytes
    (one Linear(4, 4) is 80 bytes)."""

    def build(g):
        x = g.placeholder("x")
        h = g.call_module("lin1", (x,))
        g.output(g.call_module("lin1", (h,)))

    opt = _optimizer(_recording_backend([]), 10**9)
    opt.compile_fn(_graph(build), [_x()])
    return tuple(b.size for b in opt.buckets)


# --------------------- < 2.4: get_attr of a module (``self.lin.forward(x)``)


def _patch_get_attr_module_raises(mp) -> None:
    """Before 2.4, compile_fn read ``getattr(gm, node.target).requires_grad``
    for every get_attr node and had no call_method branch: a graph that calls
    ``self.lin.forward(x)`` (Dynamo: get_attr of the module, call_method
    ``forward``) raised AttributeError. The wrapper makes that read first
    (HOP bodies left out: 2.1-2.5 rejected those graphs earlier, by their own
    NotImplementedError)."""
    import torch.fx as fx

    dist = _dist()
    original = dist.DDPOptimizer.compile_fn

    def compile_fn(self, gm, example_inputs, **configs):
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                attr = getattr(gm, node.target)
                if not isinstance(attr, fx.GraphModule):
                    attr.requires_grad  # noqa: B018 - the old read, raising on a module
        return original(self, gm, example_inputs, **configs)

    mp.setattr(dist.DDPOptimizer, "compile_fn", compile_fn)


def _witness_get_attr_module_raises():
    """``lin1.forward(x)`` as Dynamo writes it (get_attr lin1, call_method
    forward): the bucket sizes, or the error compile_fn raised."""

    def build(g):
        x = g.placeholder("x")
        lin = g.get_attr("lin1")
        g.output(g.call_method("forward", (lin, x)))

    opt = _optimizer(_recording_backend([]), 10**9)
    try:
        opt.compile_fn(_graph(build), [_x()])
    except Exception as exc:
        return type(exc).__name__
    return tuple(b.size for b in opt.buckets)


# ----------------------- < 2.5: parameters that are graph inputs not counted


def _patch_placeholder_params_ignored(mp) -> None:
    """Before 2.5, compile_fn counted parameters only at call_module and
    get_attr nodes; with nn-module inlining Dynamo passes parameters as graph
    inputs read by call_function nodes (``F.linear(x, w, b)``), which counted
    nothing. 2.5 added ``add_param_args``; a no-op puts the old counting back."""
    mp.setattr(_dist().DDPOptimizer, "add_param_args", lambda self, bucket, node: None)


def _witness_placeholder_params_ignored():
    """Two F.linear layers on parameters that are placeholders (their
    ``example_value`` the Parameters, as Dynamo records them), cap 1 byte:
    the bucket sizes."""
    import torch
    import torch.nn.functional as F

    lins = [torch.nn.Linear(4, 4) for _ in range(2)]

    def build(g):
        params = []
        for i, lin in enumerate(lins):
            w, b = g.placeholder(f"w{i}"), g.placeholder(f"b{i}")
            w.meta["example_value"], b.meta["example_value"] = lin.weight, lin.bias
            params.append((w, b))
        h = g.placeholder("x")
        h.meta["example_value"] = None
        for w, b in params:
            h = g.call_function(F.linear, (h, w, b))
        g.output(h)

    opt = _optimizer(_recording_backend([]), 1)
    inputs = [t for lin in lins for t in (lin.weight, lin.bias)] + [_x()]
    opt.compile_fn(_graph(build), inputs)
    return tuple(b.size for b in opt.buckets)


# --------------- < 2.3: later buckets' example inputs have eager strides


def _patch_eager_strides(mp) -> None:
    """Before 2.3, the next bucket's example inputs came from running the
    uncompiled submodule on fake tensors (eager strides), never from the
    compiled one. 2.3 asks AOTAutograd to return its first call's outputs as
    fakes with the compiler's strides (``fakify_first_call``) and runs the
    compiled submodule when AOTAutograd was invoked. The wrapper turns the
    flag off while the submodule compiles and hides the AOTAutograd call from
    the counter, so run_node takes the eager path as 2.2 did."""
    dist = _dist()
    original = dist.SubmodCompiler.compile_submod

    def compile_submod(self, input_mod, args, kwargs):
        import torch
        from torch._dynamo.utils import counters

        tc = torch._guards.TracingContext.try_get()
        if tc is not None:
            tc.fakify_first_call = False
        before = counters["aot_autograd"]["total"]
        try:
            return original(self, input_mod, args, kwargs)
        finally:
            counters["aot_autograd"]["total"] = before

    mp.setattr(dist.SubmodCompiler, "compile_submod", compile_submod)


def _witness_eager_strides():
    """Dynamo compiles lin2(lin1(x)) through DDPOptimizer (cap 1 byte, two
    buckets) with an AOTAutograd backend whose forward compiler reports a
    column-major layout for its outputs, as inductor reports a layout it
    chose: the strides of each bucket's example inputs."""
    import torch
    import torch.nn as nn
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.reset()

    def fw_compiler(gm, example_inputs):
        tc = torch._guards.TracingContext.try_get()
        if tc is not None and tc.output_strides is not None:
            for node in gm.graph.find_nodes(op="output"):
                for out in node.args[0]:
                    val = out.meta.get("val") if isinstance(out, torch.fx.Node) else None
                    if isinstance(val, torch.Tensor) and val.dim() == 2:
                        tc.output_strides.append((1, int(val.shape[0])))
                    else:
                        tc.output_strides.append(None)
        return make_boxed_func(gm.forward)

    inner = aot_autograd(fw_compiler=fw_compiler)
    seen = []

    def recording(gm, example_inputs, **configs):
        seen.append(tuple(tuple(t.stride()) for t in example_inputs if isinstance(t, torch.Tensor)))
        return inner(gm, example_inputs, **configs)

    def backend(gm, example_inputs):
        return _optimizer(recording, 1).compile_fn(gm, example_inputs)

    model = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 4))
    torch.compile(model, backend=backend)(torch.randn(8, 4))
    torch._dynamo.reset()
    return tuple(seen)


# ---------------- < 2.7: the caller's saved_tensors_hooks fire on the buckets


def _patch_hooks_fire(mp) -> None:
    """Before 2.7, compile_fn ran the split (fake propagation and the backend
    calls) with whatever saved_tensors_hooks the caller had active; 2.7 runs
    it under ``_disable_saved_tensors_hooks_during_tracing``. The wrapper
    turns that tracing flag back off for the run."""
    import torch

    dist = _dist()
    original = dist.SubmodCompiler.run

    def run(self, *args, **kwargs):
        prior = torch._C._autograd._saved_tensors_hooks_set_tracing(False)
        try:
            return original(self, *args, **kwargs)
        finally:
            torch._C._autograd._saved_tensors_hooks_set_tracing(prior)

    mp.setattr(dist.SubmodCompiler, "run", run)


def _witness_hooks_fire():
    """x -> lin1 -> lin2 -> lin3 split at 1 byte, compiled under the caller's
    saved_tensors_hooks: how many times the pack hook ran during compile_fn."""
    import torch

    def build(g):
        h = g.placeholder("x")
        for name in ("lin1", "lin2", "lin3"):
            h = g.call_module(name, (h,))
        g.output(h)

    packed = []

    def pack(t):
        packed.append(type(t).__name__)
        return t

    opt = _optimizer(_recording_backend([]), 1)
    gm = _graph(build)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        opt.compile_fn(gm, [torch.randn(2, 4, requires_grad=True)])
    return len(opt.buckets), len(packed)


# -------------------------- < 2.8: split submodules lose Dynamo's metadata


def _patch_metadata_dropped(mp) -> None:
    """Before 2.8, the submodules split_module made reached the backend
    without the captured graph's ``meta``, ``_param_name_to_source`` or the
    placeholders' ``_dynamo_source``; 2.8 added the two propagate helpers.
    No-ops restore the old hand-off."""
    dist = _dist()
    mp.setattr(dist, "propagate_metadata", lambda orig_gm, split_gm: None)
    mp.setattr(dist, "propagate_dynamo_source", lambda orig_gm, split_gm: None)


def _dynamo_like_graph(build):
    gm = _graph(build)
    gm.meta = {"dynamo_flat_name_to_original_fqn": {"lin1": "lin1", "lin2": "lin2"}, "dynamo_compile_id": "0/0"}
    gm._param_name_to_source = {"lin1.weight": "L['self'].lin1.weight"}
    for node in gm.graph.find_nodes(op="placeholder"):
        node._dynamo_source = f"L['{node.target}']"
    return gm


def _witness_metadata_dropped():
    """x -> lin1 -> lin2 with the metadata Dynamo leaves on a captured graph,
    split at 1 byte: for each backend call, the graph-module ``meta`` keys,
    whether it has ``_param_name_to_source``, and its placeholders'
    ``_dynamo_source``."""

    def build(g):
        x = g.placeholder("x")
        g.output(g.call_module("lin2", (g.call_module("lin1", (x,)),)))

    calls = []
    _optimizer(_recording_backend(calls), 1).compile_fn(_dynamo_like_graph(build), [_x()])
    return tuple(
        (
            tuple(sorted(gm.meta)),
            hasattr(gm, "_param_name_to_source"),
            tuple(getattr(n, "_dynamo_source", None) for n in gm.graph.find_nodes(op="placeholder")),
        )
        for gm, _, _ in calls
    )


# ---------- < 2.9: lazy backward compiles read the last bucket's fw_metadata


def _patch_fw_metadata_clobbered(mp) -> None:
    """Before 2.9, DDPOptimizer left one ``fw_metadata`` on Dynamo's
    TracingContext, the last bucket's: each lazily compiled backward (bucket
    N first, then N-1, …) compiled against it. 2.9 keeps one per bucket
    (``ddp_optimizer_ctx``) and AOTAutograd restores the right one before each
    backward compile. Dropping that context after compile_fn restores the old
    hand-off."""
    import torch

    dist = _dist()
    original = dist.DDPOptimizer.compile_fn

    def compile_fn(self, gm, example_inputs, **configs):
        compiled = original(self, gm, example_inputs, **configs)
        tc = torch._guards.TracingContext.try_get()
        if tc is not None:
            tc.ddp_optimizer_ctx = None
        return compiled

    mp.setattr(dist.DDPOptimizer, "compile_fn", compile_fn)


def _witness_fw_metadata_clobbered():
    """Dynamo compiles lin3(lin2(lin1(x))) through DDPOptimizer (cap 1 byte,
    three buckets) with an AOTAutograd backend; after one forward and
    backward: for each backward compile (in the order they ran), the index of
    the forward bucket whose fw_metadata the TracingContext held."""
    import torch
    import torch.nn as nn
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.reset()
    forwards, backwards = [], []

    def fw_compiler(gm, example_inputs):
        forwards.append(torch._guards.TracingContext.get().fw_metadata)
        return make_boxed_func(gm.forward)

    def bw_compiler(gm, example_inputs):
        meta = torch._guards.TracingContext.get().fw_metadata
        backwards.append(next((i for i, m in enumerate(forwards) if m is meta), None))
        return make_boxed_func(gm.forward)

    inner = aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler)

    def backend(gm, example_inputs):
        return _optimizer(inner, 1).compile_fn(gm, example_inputs)

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4))
    torch.compile(model, backend=backend)(torch.randn(2, 4)).sum().backward()
    torch._dynamo.reset()
    return len(forwards), tuple(backwards)


# ------------- < 2.13: HOP bodies' metadata overwritten by the graph's


def _patch_hop_body_meta_clobbered(mp) -> None:
    """2.8-2.12 propagated the captured graph's metadata to every top-level
    child of the split module, which includes the HOP bodies split_module
    hoists (``wrap_body_*``, carrying e.g. ``_checkpoint_context_fn`` for
    selective activation checkpointing). 2.13 limits it to the partitions
    (``split_gm.meta["partition_names"]``). The helpers below select children
    the 2.12 way."""
    dist = _dist()

    def top_level(split_gm):
        return [(name, m) for name, m in split_gm.named_modules() if "." not in name and len(name)]

    def propagate_metadata(orig_gm, split_gm):
        for _, module in top_level(split_gm):
            module.meta = orig_gm.meta
            module._param_name_to_source = orig_gm._param_name_to_source

    def propagate_dynamo_source(orig_gm, split_gm):
        sources = {n.name: n._dynamo_source for n in orig_gm.graph.find_nodes(op="placeholder")}
        for _, module in top_level(split_gm):
            for node in module.graph.find_nodes(op="placeholder"):
                node._dynamo_source = sources.get(node.name)

    mp.setattr(dist, "propagate_metadata", propagate_metadata)
    mp.setattr(dist, "propagate_dynamo_source", propagate_dynamo_source)


def _witness_hop_body_meta_clobbered():
    """lin1, then a ``wrap`` HOP whose body (``wrap_body_0``) carries its own
    ``_checkpoint_context_fn``, then lin2; split at 1 byte: the ``meta`` keys
    of every GraphModule child of the split module but the partitions."""
    import torch
    import torch.fx as fx
    import torch.nn as nn

    body_graph = fx.Graph()
    a = body_graph.placeholder("a")
    body_graph.output((body_graph.call_function(torch.sin, (a,)),))
    body = fx.GraphModule(nn.Module(), body_graph)
    body.meta["_checkpoint_context_fn"] = "policy"
    root = nn.Module()
    root.lin1, root.lin2, root.wrap_body_0 = nn.Linear(4, 4), nn.Linear(4, 4), body

    def build(g):
        x = g.placeholder("x")
        h = g.call_module("lin1", (x,))
        r = g.call_function(torch.ops.higher_order.wrap, (g.get_attr("wrap_body_0"), h))
        g.output(g.call_module("lin2", (g.call_function(operator.getitem, (r, 0)),)))

    gm = _graph(build, root)
    gm.meta = {"dynamo_compile_id": "0/0"}
    split = _optimizer(_recording_backend([]), 1).compile_fn(gm, [_x()])
    partitions = split.meta.get("partition_names", set())
    return tuple(
        (name, tuple(sorted(m.meta)))
        for name, m in split.named_children()
        if isinstance(m, fx.GraphModule) and name not in partitions and not name.startswith("compiled_")
    )


# ------------------ < 2.13: compiler configs rejected by compile_fn


def _patch_configs_rejected(mp) -> None:
    """compile_fn took ``(gm, example_inputs)`` only up to 2.12; Dynamo's
    per-graph inductor override calls the backend with
    ``config_patches=...``, which raised TypeError under DDPOptimizer. 2.13
    takes ``**compiler_configs`` and hands them to every backend call. The
    replacement has the old signature."""
    dist = _dist()
    original = dist.DDPOptimizer.compile_fn

    def compile_fn(self, gm, example_inputs):
        return original(self, gm, example_inputs)

    mp.setattr(dist.DDPOptimizer, "compile_fn", compile_fn)


def _witness_configs_rejected():
    """x -> lin1 -> lin2 compiled with ``config_patches`` once unsplit (cap
    large) and once split (cap 1 byte): the keyword arguments each backend
    call got, or the error."""

    def build(g):
        x = g.placeholder("x")
        g.output(g.call_module("lin2", (g.call_module("lin1", (x,)),)))

    answers = []
    for cap in (10**9, 1):
        calls = []
        try:
            _optimizer(_recording_backend(calls), cap).compile_fn(
                _graph(build), [_x()], config_patches={"max_autotune": False}
            )
            answers.append(tuple(tuple(sorted(c)) for _, _, c in calls))
        except TypeError:
            answers.append("TypeError")
    return tuple(answers)


# -------------- 2.0: a fake mode of its own instead of Dynamo's


def _patch_own_fake_mode(mp) -> None:
    """torch 2.0.1 took the fake mode from the example inputs only
    (``fake_mode_from_tensors``) and otherwise made a fresh one; Dynamo hands
    compile_fn real tensors, so the buckets were propagated in a fake mode of
    their own, with no shape environment. 2.1 uses ``detect_fake_mode``, which
    takes the TracingContext's first."""
    from torch._subclasses.fake_tensor import FakeTensor

    def from_tensors_only(inputs):
        return next((t.fake_mode for t in inputs if isinstance(t, FakeTensor)), None)

    mp.setattr(_dist(), "detect_fake_mode", from_tensors_only)


def _witness_own_fake_mode():
    """Dynamo compiles lin2(lin1(x)) with ``dynamic=True`` through
    DDPOptimizer (cap 1 byte) with an AOTAutograd backend: for each bucket,
    each tensor input's shape and whether its fake mode is Dynamo's."""
    import torch
    import torch.nn as nn
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.reset()
    inner = aot_autograd(fw_compiler=lambda gm, example_inputs: make_boxed_func(gm.forward))
    seen = []

    def recording(gm, example_inputs, **configs):
        tc = torch._guards.TracingContext.try_get()
        mine = tc.fake_mode if tc is not None else None
        seen.append(tuple((str(tuple(t.shape)), getattr(t, "fake_mode", None) is mine)
                          for t in example_inputs if isinstance(t, torch.Tensor)))
        return inner(gm, example_inputs, **configs)

    def backend(gm, example_inputs):
        return _optimizer(recording, 1).compile_fn(gm, example_inputs)

    model = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 4))
    torch.compile(model, backend=backend, dynamic=True)(torch.randn(8, 4))
    torch._dynamo.reset()
    return tuple(seen)


ROWS: tuple[RealBug, ...] = (
    RealBug(
        id="spl-bucket-closes-without-output",
        area="splitting",
        behaviour="A bucket closes as soon as it reaches its cap, whether or not any of its nodes is used outside "
        "it: a tail of nodes whose results nothing reads becomes a split submodule without an output.",
        had="2.0.1",
        fixed_in="2.1.2",
        upstream=("pytorch/pytorch#103488",),
        patch=_patch_close_without_output,
        witness=_witness_close_without_output,
        invariants=("SPL-5", "SPL-6", "SPL-7"),
        known="spl-bucket-closes-without-output",
        note="Read from the wheels' source: 2.0.1's compile_fn inserts a new bucket whenever the current one is "
        "full; 2.1.2 adds bucket_has_external_output and extends the bucket (opcount_increased_to_capture_"
        "external_output), unchanged to 2.15.0. The patch answers the helper's question with yes, which is 2.0's "
        "rule (2.0 had no extension counters; they stay 0).",
    ),
    RealBug(
        id="spl-param-counted-per-node",
        area="splitting",
        behaviour="A module called twice has its parameters counted at each call_module node: the bucket is twice "
        "as heavy as its parameters and may close early.",
        had="2.0.1 … 2.3.1",
        fixed_in="2.4.1",
        upstream=("pytorch/pytorch#121771",),
        patch=_patch_counted_per_node,
        witness=_witness_counted_per_node,
        invariants=("SPL-4",),
        known="spl-param-counted-per-node",
        note="2.0.1-2.3.1 add every named parameter of the target module at each call_module node; 2.4.1 adds "
        "add_module_params_to_bucket and the processed_modules set (the PR found in the issue search, 'Support "
        "call_method in DDPOptimizer', says it also checks whether a module's parameters were already added). The "
        "patch keeps 2.13's helper but never records the module as processed. get_attr and (from 2.5) "
        "placeholder-argument reads are still counted per node in 2.13 (spl-param-counted-per-use), untouched.",
    ),
    RealBug(
        id="spl-get-attr-module-raises",
        area="splitting",
        behaviour="A graph that calls a submodule's forward as a method (`self.lin.forward(x)`: Dynamo writes a "
        "get_attr of the module and a call_method `forward`) makes compile_fn raise AttributeError: it reads "
        "`requires_grad` off every get_attr target.",
        had="2.0.1 … 2.3.1",
        fixed_in="2.4.1",
        upstream=("pytorch/pytorch#121771",),
        patch=_patch_get_attr_module_raises,
        witness=_witness_get_attr_module_raises,
        invariants=("SPL-3", "SPL-9"),
        known="spl-get-attr-module-raises",
        note="2.0.1-2.3.1 read `maybe_param.requires_grad` for every get_attr node and have no call_method branch; "
        "2.4.1 checks isinstance(..., nn.Parameter) and counts the module of a call_method receiver (the PR text "
        "gives this exact form, MultiheadAttention calling a Linear's forward). The wrapper makes the old read "
        "before 2.13's compile_fn runs; HOP bodies (GraphModule attributes) are left out because 2.1-2.5 rejected "
        "those graphs earlier with their own NotImplementedError (2.0.1 would have raised here too).",
    ),
    RealBug(
        id="spl-placeholder-params-not-counted",
        area="splitting",
        behaviour="Parameters that reach the graph as inputs (Dynamo's inlined nn modules: `F.linear(x, w, b)` on "
        "placeholders) weigh nothing: the whole graph is one bucket, never split.",
        had="2.0.1 … 2.4.1",
        fixed_in="2.5.1",
        upstream=("pytorch/pytorch#128034",),
        patch=_patch_placeholder_params_ignored,
        witness=_witness_placeholder_params_ignored,
        invariants=("SPL-3",),
        note="2.5.1 adds add_param_args (placeholder arguments whose example_value is a trainable Parameter, for "
        "call_function and call_method nodes); no release before counts them. The PR ('handle call_function with "
        "Parameter args in DDPOptimizer splitting') ties it to nn-module inlining, which made Dynamo graphs of "
        "this form. The patch makes add_param_args a no-op. (The same helper brought two bugs still in 2.13: "
        "spl-ddp-ignored-lost-on-fake and spl-method-arg-receiver-not-str.)",
    ),
    RealBug(
        id="spl-later-bucket-eager-strides",
        area="splitting",
        behaviour="Each later bucket is compiled with example inputs that have the strides of running the earlier "
        "submodules uncompiled, not those the compiled submodules return (inductor may pick another layout): the "
        "compiled bucket expects a layout it will not get.",
        had="2.0.1 … 2.2.2",
        fixed_in="2.3.1",
        upstream=("pytorch/pytorch#120523", "pytorch/pytorch#113812", "pytorch/pytorch#107362"),
        patch=_patch_eager_strides,
        witness=_witness_eager_strides,
        invariants=("SPL-17",),
        note="2.0.1-2.2.2 run `curr_submod` (the uncompiled submodule, fakified) to make the next bucket's inputs; "
        "2.2.2 also asserts inductor's keep_output_stride, the stop-gap of pytorch/pytorch#108235. 2.3.1 sets "
        "fakify_first_call and runs the compiled submodule when AOTAutograd was invoked (Note 'Returning Fake "
        "Tensors on First AOT Autograd Call'; 2.3-2.4 also carry the lazy-compile path, off by default). The "
        "patch clears the flag while a submodule compiles and hides the AOTAutograd call from the counter, so "
        "run_node takes 2.2's path. The witness's forward compiler reports a column-major layout through "
        "TracingContext.output_strides, the way inductor reports the layout it chose.",
    ),
    RealBug(
        id="spl-callers-saved-tensors-hooks-fire",
        area="splitting",
        behaviour="The caller's saved_tensors_hooks fire while DDPOptimizer propagates example values through the "
        "buckets at compile time (the pack hook receives fake tensors; with non-reentrant activation "
        "checkpointing the hooks fire more often than in eager).",
        had="2.0.1 … 2.6.0",
        fixed_in="2.7.1",
        upstream=("pytorch/pytorch#144271",),
        patch=_patch_hooks_fire,
        witness=_witness_hooks_fire,
        invariants=("SPL-18",),
        note="2.7.1 wraps `submod_compiler.run` in torch._dynamo.utils._disable_saved_tensors_hooks_during_tracing; "
        "no earlier source disables the hooks around the split (the Dynamo/AOTAutograd-wide disabling came "
        "before, DDPOptimizer's call site was the one left: the PR 'fix torch.compile + ddp + non-reentrant AC "
        "pack hook firing count'). The patch turns the tracing flag off again for the run. SPL-18's `provided` "
        "reads the same 2.7 boundary.",
    ),
    RealBug(
        id="spl-split-submodules-lose-dynamo-metadata",
        area="splitting",
        behaviour="The submodules handed to the backend carry none of the captured graph's metadata (meta, "
        "_param_name_to_source, placeholders' _dynamo_source): aot_autograd finds no static inputs and cudagraphs "
        "re-record on every call.",
        had="2.0.1 … 2.7.1",
        fixed_in="2.8.0",
        upstream=("pytorch/pytorch#140395", "pytorch/pytorch#155746"),
        patch=_patch_metadata_dropped,
        witness=_witness_metadata_dropped,
        invariants=("SPL-10",),
        known="spl-split-submodules-lose-dynamo-metadata",
        note="propagate_metadata and propagate_dynamo_source first appear in 2.8.0 (pytorch/pytorch#155746, "
        "'Fix DDPOptimizer issue on static tensor index', fixes #140395); no earlier source copies the metadata. "
        "The known bug's range (<2.8, measured 2.4.1-2.7.1) agrees; the earlier releases were read, not run. The "
        "patch makes both helpers no-ops.",
    ),
    RealBug(
        id="spl-backward-compiles-with-last-bucket-fw-metadata",
        area="splitting",
        behaviour="Every lazily compiled backward of a split graph (bucket N first, then N-1, …) is compiled with "
        "the forward metadata of the last bucket left on Dynamo's TracingContext, not its own (with inductor's "
        "donated buffers: buffers donated and written wrongly).",
        had="2.0.1 … 2.8.0",
        fixed_in="2.9.1",
        upstream=("pytorch/pytorch#160745",),
        patch=_patch_fw_metadata_clobbered,
        witness=_witness_fw_metadata_clobbered,
        invariants=("SPL-10", "SPL-11"),
        known="spl-backward-compiles-with-last-bucket-fw-metadata",
        note="2.9.1 adds DDPOptimizerContext (one fw_metadata per bucket, installed on the TracingContext by "
        "SubmodCompiler and appended in run_node), which AOTAutograd's lazy backward uses (Note 'DDPOptimizer and "
        "fw_metadata'); no earlier DDPOptimizer source keeps more than the one Dynamo context. Read on the "
        "DDPOptimizer side only: when the backward compile first read fw_metadata (AOTAutograd/inductor) was not "
        "read per release, so the bottom of the range is the file's. The patch drops the per-bucket context after "
        "compile_fn, which is 2.8's hand-off. No SPL states fw_metadata itself: SPL-10 (what the backend is "
        "handed) and SPL-11 (gradients) are where it shows.",
    ),
    RealBug(
        id="spl-hop-body-metadata-clobbered",
        area="splitting",
        behaviour="The captured graph's metadata is copied onto every top-level child of the split module, "
        "including HOP bodies split_module hoists (wrap_body_*): their own metadata, such as selective activation "
        "checkpointing's _checkpoint_context_fn, is lost and the SAC policy is never called.",
        had="2.8.0 … 2.12.1",
        fixed_in="2.13.0",
        upstream=("pytorch/pytorch#179496",),
        patch=_patch_hop_body_meta_clobbered,
        witness=_witness_hop_body_meta_clobbered,
        invariants=("SPL-14", "SPL-10"),
        known="spl-hop-body-metadata-clobbered",
        note="2.8.0-2.12.1 select children with `'.' not in name and len(name)`; 2.13.0 reads "
        "split_gm.meta['partition_names'], which 2.13's split_module records (pytorch/pytorch#179496, 'Fix SAC "
        "context_fn clobbered by DDPOptimizer's propagate_metadata'). Before 2.8 nothing was propagated at all "
        "(spl-split-submodules-lose-dynamo-metadata). The patch puts back both helpers with 2.12's selection.",
    ),
    RealBug(
        id="spl-compiler-configs-rejected",
        area="splitting",
        behaviour="compile_fn takes only (gm, example_inputs): a caller passing compiler configs (Dynamo's "
        "per-graph inductor override calls the backend with config_patches=...) gets TypeError, and no bucket "
        "can receive them.",
        had="2.0.1 … 2.12.1",
        fixed_in="2.13.0",
        upstream=("pytorch/pytorch#179623", "pytorch/pytorch#174228"),
        patch=_patch_configs_rejected,
        witness=_witness_configs_rejected,
        invariants=("SPL-19",),
        note="2.13.0 adds **compiler_configs to compile_fn and SubmodCompiler and passes them to every backend "
        "call (pytorch/pytorch#179623, 'Forward compiler configs through DDPOptimizer': "
        "TORCH_COMPILE_OVERRIDE_INDUCTOR_CONFIGS failed with DDPOptimizer). Every earlier source has the two-"
        "argument signature; the failure needs Dynamo's override (pytorch/pytorch#174228), whose first release "
        "was not read, so releases before it had no caller to fail. SPL-19's `provided` starts at 2.13 for the "
        "same reason. The replacement has the old signature.",
    ),
    RealBug(
        id="spl-own-fake-mode",
        area="splitting",
        behaviour="With Dynamo's real example inputs, DDPOptimizer propagates the buckets in a fresh fake mode of "
        "its own (no shape environment) instead of Dynamo's: under dynamic shapes the first bucket's inputs are "
        "static and the buckets' example inputs mix fake modes.",
        had="2.0.1",
        fixed_in="2.1.2",
        upstream=("pytorch/pytorch#98321",),
        patch=_patch_own_fake_mode,
        witness=_witness_own_fake_mode,
        invariants=("SPL-17", "SPL-10"),
        note="2.0.1 calls fake_mode_from_tensors(example_inputs) and makes a FakeTensorMode() when none is found; "
        "2.1.2 calls detect_fake_mode, which prefers the TracingContext's (pytorch/pytorch#98321, 'Add "
        "detect_fake_mode', which replaced fake_mode_from_tensors because the wrong fake mode was detected). "
        "The patch binds 2.0's rule to the name compile_fn reads. The witness runs 2.13's Dynamo, which hands "
        "compile_fn real tensors; whether 2.0's Dynamo did too was not read.",
    ),
)
