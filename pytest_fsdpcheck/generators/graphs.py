"""FX graphs for the splitting area: a pure-data spec, its builder, and
hypothesis strategies.

A ``GraphSpec`` is a straight-line program over one activation ``h`` of shape
``[batch, width]``: every op reads ``h`` (and maybe a module, a parameter, a
buffer or an earlier value) and produces the next ``h``. It prints as valid
Python (``to_source``) so a failing example replays without hypothesis.

``build_graph(spec, form)`` gives ``(GraphModule, example_inputs)`` in the
form an implementation consumes:

* ``"module"`` (seed era, torch <= 2.3): ``fx.symbolic_trace`` of the eager
  ``SpecModule`` -- ``call_module`` for leaf modules, ``get_attr`` for direct
  parameters and buffers.
* ``"dynamo"`` (torch >= 2.4): synthesized directly, the way Dynamo hands a
  graph to a backend -- parameters and buffers lifted to placeholders in first
  use order, each with ``meta["example_value"]`` (the tensor itself) and a
  ``_dynamo_source``; built-in modules inlined into their functional calls.
  No ``torch.compile`` per example: ``tests/test_graph_generators.py`` checks
  the synthesized graph against a real Dynamo capture of ``SpecModule``.
"""

from __future__ import annotations

import importlib
import operator
from dataclasses import dataclass

from hypothesis import strategies as st

MODULE_KINDS = ("linear", "norm", "conv", "embedding")
VOCAB = 5  # embedding rows
DTYPES = ("float32", "float64", "bfloat16")


@dataclass(frozen=True)
class ModuleSpec:
    kind: str  # one of MODULE_KINDS
    frozen: bool = False
    ignored: bool = False  # parameters carry ``_ddp_ignored = True``
    tied_to: int | None = None  # linear only: reuse that linear module's weight


@dataclass(frozen=True)
class ParamSpec:
    """A parameter used directly: ``matrix`` ``[w, w]`` (``h @ p.t()``),
    ``vector`` ``[w]`` (``h * p``, in ``dtype``, cast back to float32) or
    ``empty`` ``[0]`` (``h + p.sum()``: a parameter of no elements and no
    bytes, still trainable and read; fixed cases only, the strategies do not
    draw it)."""

    kind: str = "matrix"
    dtype: str = "float32"
    frozen: bool = False
    ignored: bool = False


@dataclass(frozen=True)
class OpSpec:
    """``kind``: ``module`` (ref = module), ``param`` (ref = parameter;
    ``method`` uses ``h.mul(p)`` instead of ``torch.mul(h, p)`` for vectors),
    ``act`` (tanh), ``mutate`` (``t = h + 1; t.mul_(2)``: a node with no
    users), ``buffer`` (ref = buffer), ``skip`` (``h + values[ref]``; value 0
    is the input; ``method`` uses ``values[ref].add(h)``, a method call
    taking the running value, a module's output among them, as its argument;
    fixed cases only, the strategies do not draw it), ``hop`` (``torch.ops.higher_order.wrap`` of ``h @ p.t()``,
    ref = a matrix parameter), ``accum`` (``t = h * 2; t.add_(h @ p.t())``,
    ref = a matrix parameter: parameter-reading nodes whose only user is a
    mutation with no users, so a bucket can reach its cap without an
    external output and must be extended), ``scratch`` (``(h @ p.t()).mul_(2)``
    with ``h`` unchanged, ref = a matrix parameter: a parameter read no later
    node depends on, so a bucket extended over it absorbs its bytes; fixed
    cases only, the strategies do not draw it), ``layout`` (the same values
    of ``h`` laid out otherwise, so a bucket can take an activation that is
    not contiguous: ref 0 column-major, ``h.t().contiguous().t()``; ref 1
    broadcast, ``h.sum(-1, keepdim=True).expand_as(h)``, a row sum with
    stride 0 along the width; ref 2 a strided slice,
    ``torch.cat((h, h), 1)[:, ::2]``), ``forward`` (ref = a linear module
    called through its ``forward``, ``self.mods[ref].forward(h)``: in module
    form a ``get_attr`` of the module and a ``call_method`` ``forward``, as
    torch 2.4's Dynamo captures it with nn-module inlining off; in Dynamo
    form the same inlined ``linear`` as ``module``; fixed cases only, the
    strategies do not draw it)."""

    kind: str
    ref: int = 0
    method: bool = False


@dataclass(frozen=True)
class GraphSpec:
    width: int
    batch: int
    modules: tuple[ModuleSpec, ...]
    params: tuple[ParamSpec, ...]
    buffers: int
    ops: tuple[OpSpec, ...]
    outputs: tuple[int, ...] = ()  # extra values returned before the final one

    def to_source(self) -> str:
        return repr(self)

    def uses(self) -> dict:
        """``("module"|"param", index) -> number of op nodes reading it``;
        a tied linear also reads its tie target's weight."""
        count: dict = {}
        for op in self.ops:
            keys = []
            if op.kind in ("module", "forward"):
                keys.append(("module", op.ref))
                tied = self.modules[op.ref].tied_to
                if tied is not None:
                    keys.append(("module", tied))
            elif op.kind in ("param", "hop", "accum", "scratch"):
                keys.append(("param", op.ref))
            for key in keys:
                count[key] = count.get(key, 0) + 1
        return count

    @property
    def has_hop(self) -> bool:
        return any(op.kind == "hop" for op in self.ops)

    @property
    def needs_index(self) -> bool:
        return any(op.kind == "module" and self.modules[op.ref].kind == "embedding" for op in self.ops)


# --------------------------------------------------------------------------- eager model


def _torch():
    import torch

    return torch


def make_module(spec: GraphSpec, device="cpu"):
    """The eager ``nn.Module`` the spec describes (``SpecModule``)."""
    torch = _torch()
    nn = torch.nn

    class SpecModule(nn.Module):
        def __init__(self):
            super().__init__()
            w = spec.width
            mods = []
            for m in spec.modules:
                if m.kind == "linear":
                    mods.append(nn.Linear(w, w))
                elif m.kind == "norm":
                    mods.append(nn.LayerNorm(w))
                elif m.kind == "conv":
                    mods.append(nn.Conv1d(w, w, 1))
                else:
                    mods.append(nn.Embedding(VOCAB, w))
            for m, mod in zip(spec.modules, mods, strict=False):
                if m.tied_to is not None:
                    mod.weight = mods[m.tied_to].weight
            self.mods = nn.ModuleList(mods)
            for i, p in enumerate(spec.params):
                shape = {"matrix": (w, w), "empty": (0,)}.get(p.kind, (w,))
                self.register_parameter(f"p{i}", nn.Parameter(torch.randn(shape, dtype=getattr(torch, p.dtype))))
            for i in range(spec.buffers):
                self.register_buffer(f"b{i}", torch.rand(w) + 0.5)
            # flags after ties, so a tied weight takes the flags of the module listed last
            for m, mod in zip(spec.modules, mods, strict=False):
                for prm in mod.parameters(recurse=False):
                    if m.frozen:
                        prm.requires_grad_(False)
                    if m.ignored:
                        prm._ddp_ignored = True
            for i, p in enumerate(spec.params):
                prm = getattr(self, f"p{i}")
                if p.frozen:
                    prm.requires_grad_(False)
                if p.ignored:
                    prm._ddp_ignored = True

        def forward(self, x, idx=None):
            values = [x]
            h = x
            for op in spec.ops:
                if op.kind in ("module", "forward"):  # forward: rewritten in module form (_calls_to_forward)
                    mod = self.mods[op.ref]
                    kind = spec.modules[op.ref].kind
                    if kind == "conv":
                        h = mod(h.unsqueeze(-1)).squeeze(-1)
                    elif kind == "embedding":
                        h = h + mod(idx)
                    else:
                        h = mod(h)
                elif op.kind == "param":
                    p = getattr(self, f"p{op.ref}")
                    if spec.params[op.ref].kind == "matrix":
                        h = h @ p.t()
                    elif spec.params[op.ref].kind == "empty":
                        h = h + p.sum()
                    else:
                        h = h.mul(p) if op.method else torch.mul(h, p)
                        if spec.params[op.ref].dtype != "float32":
                            h = h.to(torch.float32)
                elif op.kind == "act":
                    h = torch.tanh(h)
                elif op.kind == "mutate":
                    h = h + 1
                    h.mul_(2)
                elif op.kind == "buffer":
                    h = h * getattr(self, f"b{op.ref}")
                elif op.kind == "skip":
                    h = values[op.ref].add(h) if op.method else h + values[op.ref]
                elif op.kind == "hop":
                    h = hop_body(h, getattr(self, f"p{op.ref}"))[0]
                elif op.kind == "accum":
                    t = h * 2
                    t.add_(h @ getattr(self, f"p{op.ref}").t())
                    h = t
                elif op.kind == "scratch":
                    (h @ getattr(self, f"p{op.ref}").t()).mul_(2)
                elif op.kind == "layout":
                    if op.ref == 0:
                        h = h.t().contiguous().t()
                    elif op.ref == 1:
                        h = h.sum(-1, keepdim=True).expand_as(h)
                    else:
                        h = torch.cat((h, h), 1)[:, ::2]
                values.append(h)
            return tuple(values[i] for i in spec.outputs) + (h,)

    torch.manual_seed(0)
    return SpecModule().to(device)


def hop_body(h, p):
    return (h @ p.t(),)


def make_inputs(spec: GraphSpec, device="cpu"):
    torch = _torch()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(spec.batch, spec.width, generator=gen).to(device).requires_grad_(True)
    if spec.needs_index:
        return [x, torch.randint(0, VOCAB, (spec.batch,), generator=gen).to(device)]
    return [x]


# --------------------------------------------------------------------------- builders


@dataclass
class BuiltGraph:
    gm: object  # fx.GraphModule
    example_inputs: list
    module: object  # the eager SpecModule (shares the graph's parameters)
    inputs: list  # the model's own inputs (x[, idx])
    form: str


def build_graph(spec: GraphSpec, form: str = "dynamo", device="cpu") -> BuiltGraph:
    module = make_module(spec, device)
    inputs = make_inputs(spec, device)
    if form == "module":
        torch = _torch()
        # hop_body stays one call_function node (autowrap skips "_" names), later turned into the
        # get_attr(body) + wrap form a seed-era Dynamo graph has.
        tracer = torch.fx.Tracer(autowrap_functions=(hop_body,))
        gm = torch.fx.GraphModule(tracer.root if hasattr(tracer, "root") else module, tracer.trace(module))
        if spec.has_hop:
            _hops_to_wrap(gm)
        if any(op.kind == "forward" for op in spec.ops):
            _calls_to_forward(gm, spec)
        if not spec.needs_index:  # symbolic_trace keeps the unused ``idx`` placeholder
            for node in list(gm.graph.nodes):
                if node.op == "placeholder" and node.target == "idx":
                    gm.graph.erase_node(node)
            gm.recompile()
        # Dynamo records each placeholder's example value and source in module
        # form too; DDPOptimizer (>= 2.4) reads both off the placeholders.
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for node, value in zip(placeholders, inputs, strict=False):
            node.meta["example_value"] = value
            node._dynamo_source = _source(node.target, True)
        # The graph-level metadata does not depend on the form either: torch
        # 2.4's Dynamo, which still gave module form, sets
        # `dynamo_flat_name_to_original_fqn` (compile_and_call_fx_graph) and
        # `_param_name_to_source` (call_user_compiler) on every graph it hands
        # a backend; later releases add the compile and backend ids (2.0-2.3
        # not read). The same values as the Dynamo form's, so SPL-10 asks the
        # same of both.
        _set_dynamo_metadata(gm, module)
        return BuiltGraph(gm, list(inputs), module, inputs, form)
    if form != "dynamo":
        raise ValueError(f"unknown graph form {form!r}")
    gm, example_inputs = _dynamo_graph(spec, module, inputs)
    return BuiltGraph(gm, example_inputs, module, inputs, form)


def _hops_to_wrap(gm) -> None:
    torch = _torch()
    importlib.import_module("torch._higher_order_ops.wrap")  # registers the op on torch < 2.4

    calls = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is hop_body]
    for i, node in enumerate(calls):
        name = f"wrap_body_{i}"
        gm.add_submodule(name, _hop_body_graph(name))
        with gm.graph.inserting_before(node):
            body = gm.graph.get_attr(name)
        node.target = torch.ops.higher_order.wrap
        node.args = (body, *node.args)
        # Else codegen re-registers the new target with fx.wrap by name,
        # which breaks every later trace in the process.
        node.meta.pop("is_wrapped", None)
    gm.graph.lint()
    gm.recompile()


def _calls_to_forward(gm, spec: GraphSpec) -> None:
    """The module calls of ``forward`` ops as torch 2.4's Dynamo writes
    ``self.lin.forward(h)`` with nn-module inlining off: a ``get_attr`` of
    the module under a flat name on the graph module (``L__self___lin``:
    Dynamo registers what it reads flat), its ``example_value`` the module
    itself, and a ``call_method`` ``forward`` on it. Each module or forward
    op traces to one ``call_module`` node, in the ops' order."""
    calls = [n for n in gm.graph.nodes if n.op == "call_module"]
    module_ops = [op for op in spec.ops if op.kind in ("module", "forward")]
    for node, op in zip(calls, module_ops, strict=True):
        if op.kind != "forward":
            continue
        module = gm.get_submodule(node.target)
        flat = "L__self___" + node.target.replace(".", "_")
        if not hasattr(gm, flat):
            gm.add_module(flat, module)
        with gm.graph.inserting_before(node):
            attr = gm.graph.get_attr(flat)
        attr.meta["example_value"] = module
        node.op, node.target, node.args = "call_method", "forward", (attr, *node.args)
    gm.graph.lint()
    gm.recompile()


def _source(name: str, is_input: bool):
    try:
        from torch._dynamo.source import AttrSource, LocalSource
    except ImportError:  # pragma: no cover - only the Dynamo form needs it
        return name
    def local(local_name):
        try:
            return LocalSource(local_name=local_name, is_input=True)
        except TypeError:  # torch < 2.4: LocalSource has no is_input field
            return LocalSource(local_name=local_name)

    return local(name) if is_input else AttrSource(local("self"), name)


def _dynamo_graph(spec: GraphSpec, module, inputs):
    """Emit the graph Dynamo would trace for ``module.forward``. Placeholders
    are created lazily at the first use and moved to the front afterwards."""
    torch = _torch()
    fx = torch.fx
    graph = fx.Graph()
    root = torch.nn.Module()
    lifted: dict = {}  # id(tensor) -> placeholder node
    order: list = []  # (node, tensor) in first use order
    anchor = graph.placeholder("__anchor")

    def lift(tensor, name, is_input):
        node = lifted.get(id(tensor))
        if node is None:
            with graph.inserting_before(anchor):
                node = graph.placeholder(name)
            node.meta["example_value"] = tensor
            node._dynamo_source = _source(name, is_input)
            lifted[id(tensor)] = node
            order.append(tensor)
        return node

    def param(qualname):
        is_buffer = qualname.startswith("b")
        tensor = module.get_buffer(qualname) if is_buffer else module.get_parameter(qualname)
        return lift(tensor, "l_self_" + qualname.replace(".", "_") + "_", False)

    call = graph.call_function
    meth = graph.call_method
    x = lift(inputs[0], "l_x_", True)
    values = [x]
    h = x
    hop_count = 0
    for op in spec.ops:
        if op.kind in ("module", "forward"):  # Dynamo inlines a module's forward called by name alike
            m = spec.modules[op.ref]
            pre = f"mods.{op.ref}."
            if m.kind == "linear":
                weight_owner = f"mods.{m.tied_to}." if m.tied_to is not None else pre
                h = call(torch._C._nn.linear, (h, param(weight_owner + "weight"), param(pre + "bias")))
            elif m.kind == "norm":
                h = call(torch.nn.functional.layer_norm, (h, (spec.width,), param(pre + "weight"), param(pre + "bias"), 1e-05))
            elif m.kind == "conv":
                u = meth("unsqueeze", (h, -1))
                c = call(torch.conv1d, (u, param(pre + "weight"), param(pre + "bias"), (1,), (0,), (1,), 1))
                h = meth("squeeze", (c, -1))
            else:
                idx = lift(inputs[1], "l_idx_", True)
                e = call(torch.nn.functional.embedding, (idx, param(pre + "weight"), None, None, 2.0, False, False))
                h = call(operator.add, (h, e))
        elif op.kind == "param":
            p = param(f"p{op.ref}")
            ps = spec.params[op.ref]
            if ps.kind == "matrix":
                h = call(operator.matmul, (h, meth("t", (p,))))
            elif ps.kind == "empty":
                h = call(operator.add, (h, meth("sum", (p,))))
            else:
                h = meth("mul", (h, p)) if op.method else call(torch.mul, (h, p))
                if ps.dtype != "float32":
                    h = meth("to", (h, torch.float32))
        elif op.kind == "act":
            h = call(torch.tanh, (h,))
        elif op.kind == "mutate":
            h = call(operator.add, (h, 1))
            meth("mul_", (h, 2))
        elif op.kind == "buffer":
            h = call(operator.mul, (h, param(f"b{op.ref}")))
        elif op.kind == "skip":
            h = meth("add", (values[op.ref], h)) if op.method else call(operator.add, (h, values[op.ref]))
        elif op.kind == "hop":
            body_name = f"wrap_body_{hop_count}"
            hop_count += 1
            root.add_module(body_name, _hop_body_graph(body_name))
            body = graph.get_attr(body_name)
            importlib.import_module("torch._higher_order_ops.wrap")  # registers the op on torch < 2.4
            wrapped = call(torch.ops.higher_order.wrap, (body, h, param(f"p{op.ref}")))
            h = call(operator.getitem, (wrapped, 0))
        elif op.kind == "accum":
            t = call(operator.mul, (h, 2))
            meth("add_", (t, call(operator.matmul, (h, meth("t", (param(f"p{op.ref}"),))))))
            h = t
        elif op.kind == "scratch":
            meth("mul_", (call(operator.matmul, (h, meth("t", (param(f"p{op.ref}"),)))), 2))
        elif op.kind == "layout":
            if op.ref == 0:
                h = meth("t", (meth("contiguous", (meth("t", (h,)),)),))
            elif op.ref == 1:
                h = meth("expand_as", (graph.call_method("sum", (h, -1), {"keepdim": True}), h))
            else:
                h = call(operator.getitem, (call(torch.cat, ((h, h), 1)), (slice(None, None, None), slice(None, None, 2))))
        values.append(h)
    graph.output(tuple(values[i] for i in spec.outputs) + (h,))
    graph.erase_node(anchor)
    gm = fx.GraphModule(root, graph)
    _set_dynamo_metadata(gm, module)
    gm.graph.lint()
    return gm, order


def _set_dynamo_metadata(gm, module) -> None:
    """What Dynamo puts on every graph module it hands a backend (torch
    2.13's output_graph): ``meta`` with the flat name of every parameter and
    buffer of the module mapped to its qualified name, the compile id and
    the backend id; ``_param_name_to_source``, each ``self.<name>`` mapped
    to its source. compile_fn copies them onto the split submodules (torch
    >= 2.8), where aot_autograd reads them."""
    names = [name for name, _ in module.named_parameters()] + [name for name, _ in module.named_buffers()]
    gm.meta["dynamo_flat_name_to_original_fqn"] = {"L__self___" + n.replace(".", "_"): n for n in names}
    gm.meta["dynamo_compile_id"] = _compile_id()
    gm.meta["backend_id"] = "__compiled_fn_0_fsdpcheck"
    gm._param_name_to_source = {f"self.{n}": _attr_chain(n) for n in names}


def _attr_chain(qualname: str):
    """``self.a.b`` as a chain of attribute sources (one member each, as Dynamo builds them)."""
    from torch._dynamo.source import AttrSource

    source = _source("self", True)
    for part in qualname.split("."):
        source = AttrSource(source, part)
    return source


def _compile_id():
    try:
        from torch._guards import CompileId

        return CompileId(frame_id=0, frame_compile_id=0)
    except (ImportError, TypeError):  # pragma: no cover - releases without it, or other fields
        return "0/0"


#: the key of a higher-order op's body's own ``meta`` entry (its name): a
#: body carries metadata of its own (selective activation checkpointing
#: keeps its policy there), which a split must leave as it found it (SPL-10)
HOP_BODY_META = "fsdpcheck_hop_body"


def _hop_body_graph(name: str):
    torch = _torch()
    g = torch.fx.Graph()
    h, p = g.placeholder("l_h_"), g.placeholder("l_p_")
    out = g.call_function(operator.matmul, (h, g.call_method("t", (p,))))
    g.output((out,))
    body = torch.fx.GraphModule(torch.nn.Module(), g)
    body.meta[HOP_BODY_META] = name
    return body


# --------------------------------------------------------------------------- strategies


@st.composite
def graph_specs(
    draw,
    *,
    max_ops: int = 14,
    multi_use: bool = True,
    method_args: bool = True,
    hop: bool = False,
    frozen: bool = True,
    ignored: bool = True,
    mixed_dtypes: bool = True,
    chain_only: bool = False,
):
    """Graph specs. ``multi_use`` allows modules called twice, tied weights and
    parameters read by several nodes; without it every parameter is read by
    exactly one node. ``method_args`` allows ``h.mul(p)`` (a parameter as a
    ``call_method`` argument). ``chain_only`` draws a chain of linear modules."""
    width = draw(st.sampled_from((4, 8)))
    batch = draw(st.integers(1, 3))
    if chain_only:
        n = draw(st.integers(1, 10))
        mods = tuple(ModuleSpec("linear") for _ in range(n))
        ops = []
        for i in range(n):
            ops.append(OpSpec("module", i))
            if draw(st.booleans()):
                ops.append(OpSpec("act"))
        return GraphSpec(width, batch, mods, (), 0, tuple(ops))

    n_ops = draw(st.integers(1, max_ops))
    n_mods = draw(st.integers(0, 5))
    n_params = draw(st.integers(0, 4))
    mods = []
    for i in range(n_mods):
        kind = draw(st.sampled_from(MODULE_KINDS))
        tie = None
        if multi_use and kind == "linear":
            earlier = [j for j in range(i) if mods[j].kind == "linear" and mods[j].tied_to is None]
            if earlier and draw(st.integers(0, 3)) == 0:
                tie = draw(st.sampled_from(earlier))
        mods.append(
            ModuleSpec(
                kind,
                frozen=frozen and draw(st.integers(0, 5)) == 0,
                ignored=ignored and draw(st.integers(0, 5)) == 0,
                tied_to=tie,
            )
        )
    if multi_use and all(m.tied_to is None for m in mods) and draw(st.integers(0, 9)) == 9:
        # targeted: by chance a tie needs two linears and a 1-in-4 draw (2 %
        # of graphs); a tenth of the others get a linear tied to a new one
        mods += [ModuleSpec("linear"), ModuleSpec("linear", tied_to=len(mods))]
        n_mods = len(mods)
    params = []
    for _ in range(n_params):
        kind = draw(st.sampled_from(("matrix", "vector")))
        dtype = draw(st.sampled_from(DTYPES)) if (mixed_dtypes and kind == "vector") else "float32"
        params.append(
            ParamSpec(
                kind,
                dtype,
                frozen=frozen and draw(st.integers(0, 5)) == 0,
                ignored=ignored and draw(st.integers(0, 5)) == 0,
            )
        )
    n_buffers = draw(st.integers(0, 2))
    # layout twice: a non-contiguous activation reaches a later bucket only
    # where the cut falls right after it (SPL-17)
    kinds = ["act", "mutate", "skip", "layout", "layout"]
    if mods:
        kinds += ["module"] * 3
    if params:
        kinds += ["param"] * 2
    if n_buffers:
        kinds.append("buffer")
    matrices = [i for i, p in enumerate(params) if p.kind == "matrix"]
    if matrices:
        kinds.append("accum")
    if hop and matrices:
        kinds.append("hop")
    # a parameter-free preamble (possibly empty) comes first
    preamble = draw(st.integers(0, 2))
    used: set = set()
    ops = []
    for i in range(n_ops):
        kind = draw(st.sampled_from(("act", "mutate", "skip") if i < preamble else kinds))
        ref, method = 0, False
        if kind in ("module", "param", "hop", "accum"):
            pool = range(n_mods) if kind == "module" else (matrices if kind in ("hop", "accum") else range(n_params))
            if not multi_use:
                pool = [r for r in pool if not (_keys(mods, kind, r) & used)]
            if not pool:
                kind = "act"
            else:
                ref = draw(st.sampled_from(list(pool)))
                used.update(_keys(mods, kind, ref))
                if kind == "param" and method_args and params[ref].kind == "vector":
                    method = draw(st.booleans())
        elif kind == "buffer":
            ref = draw(st.integers(0, n_buffers - 1))
        elif kind == "skip":
            ref = draw(st.integers(0, i))
        elif kind == "layout":
            ref = draw(st.integers(0, 2))
        ops.append(OpSpec(kind, ref, method))
    n_values = len(ops) + 1
    outputs = tuple(sorted(set(draw(st.lists(st.integers(1, n_values - 1), max_size=2))))) if n_values > 2 else ()
    return GraphSpec(width, batch, tuple(mods), tuple(params), n_buffers, tuple(ops), outputs)


def _keys(mods, kind, ref):
    # a tied linear also reads the weight of the module it is tied to
    if kind != "module":
        return {("p", ref)}
    keys = {("m", ref)}
    if mods[ref].tied_to is not None:
        keys.add(("m", mods[ref].tied_to))
    return keys


def graphs(form: str = "dynamo", **kwargs):
    """Strategy of ``BuiltGraph`` in ``form`` (see ``graph_specs``)."""
    return graph_specs(hop=kwargs.pop("hop", False) and form == "dynamo", **kwargs).map(lambda s: build_graph(s, form))


def large_spec(n_nodes: int = 20_000, width: int = 4) -> GraphSpec:
    """A spec whose Dynamo-form graph has about ``n_nodes`` nodes (placeholders
    included): repeating blocks of linear, tanh, mutate, parameter and skip ops."""
    block = 7  # nodes per block: linear + 2 placeholders, tanh, add + mul_, add(skip)
    n_blocks = max(1, n_nodes // block)
    mods = tuple(ModuleSpec("linear") for _ in range(n_blocks))
    ops = []
    for i in range(n_blocks):
        ops += [OpSpec("module", i), OpSpec("act"), OpSpec("mutate"), OpSpec("skip", len(ops))]
    return GraphSpec(width, 2, mods, (), 0, tuple(ops))
