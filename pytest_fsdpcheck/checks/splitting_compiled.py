"""Checkers for the splitting area's compiled split (SPL-9..12, 14, 17..19).

What the split does with a plan once it is made, judged against the
original graph: the backend calls (SPL-9, SPL-10: how many, on which
submodules, carrying what the backend reads of the graph Dynamo captured),
the example inputs each call is handed (SPL-17, inside Dynamo's compile
too), the state each runs in and what it is asked to compile with (SPL-18,
SPL-19), what the split module computes and that the original graph is
left as it was (SPL-11, SPL-12), and all of it on a graph with a
higher-order op (SPL-14). The plan's own rules, and the graph facts every
splitting checker reads, are :mod:`.splitting`'s.
"""

from __future__ import annotations

from . import Violation, error_of, short

# SPL-14 judges a split of a graph with a higher-order op as a plan too, and
# SPL-17 finds a bucket's get_attr input where the graph facts find it
from .splitting import _attr_value, check_plan

# --------------------------------------------------------------------------- SPL-9, SPL-10


def value_meta(gm, example_inputs) -> dict:
    """``node name -> (shape, dtype)`` of every tensor the graph computes."""
    import torch

    meta: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            if isinstance(result, torch.Tensor):
                meta[n.name] = (tuple(result.shape), result.dtype)
            return result

    with torch.no_grad():
        Recorder(gm).run(*example_inputs)
    return meta


def check_backend_calls(facts, buckets, calls, gm, example_inputs, meta) -> list[Violation]:
    """``calls``: ``(graph module, example inputs)`` per backend call, in order."""
    import torch

    if len(buckets) == 1:
        if len(calls) != 1:
            return [Violation("SPL-9", f"with one bucket the backend should be called once, got {len(calls)} calls")]
        called, inputs = calls[0]
        if called is not gm:
            return [Violation("SPL-9", f"with one bucket the backend should compile the original graph module, got {type(called).__name__} with {_op_count(called)} op nodes")]
        if len(inputs) != len(example_inputs) or any(a is not b for a, b in zip(inputs, example_inputs, strict=False)):
            return [Violation("SPL-9", "with one bucket the backend should get the original example inputs")]
        return []
    if len(calls) != len(buckets):
        return [Violation("SPL-10", f"with {len(buckets)} buckets the backend should be called {len(buckets)} times, got {len(calls)}")]
    out = []
    for i, (b, (called, inputs)) in enumerate(zip(buckets, calls, strict=False)):
        inside = set(b.nodes)
        external = dict.fromkeys(n for name in b.nodes for n in facts.inputs_of[name] if n not in inside)
        want = [meta[n] for n in external if n in meta]
        # split_module may pass a bucket's get_attr values in as inputs (module form)
        attrs = [meta[n] for n in b.nodes if n in facts.attrs and n in meta]
        got = [(tuple(t.shape), t.dtype) for t in inputs if isinstance(t, torch.Tensor)]
        extra = _minus(got, want)
        if extra is None or _minus(attrs, extra) is None:
            out.append(Violation("SPL-10", f"backend call {i} should get example inputs (shape, dtype) {short(sorted(want, key=repr), 6)} for bucket {i}, got {short(sorted(got, key=repr), 6)}"))
            continue
        # get_attr nodes are not counted on either side: split_module keeps
        # them in the parent graph and copies each into the submodule that
        # reads it, whichever bucket listed it
        ops = _op_count(called, attrs=False)
        want_ops = sum(1 for n in b.nodes if n not in facts.attrs)
        if ops is not None and not want_ops - len(extra) <= ops <= want_ops:
            out.append(Violation("SPL-10", f"backend call {i} should compile bucket {i}'s {want_ops} op nodes "
                                           f"(get_attr reads aside), got a module with {ops}"))
        out += _submodule_faults(i, called, gm)
    return out


def _submodule_faults(i, called, gm) -> list[Violation]:
    """What backend call ``i``'s submodule lacks of what a backend may rely
    on. AOTAutograd-based compilers take only graphs returning a tuple, so a
    bucket with one output is handed over returning a one-element tuple (and
    unwrapped again in the split module, which SPL-11 sees). And a backend
    reads the graph Dynamo captured through its metadata: ``gm.meta`` (the
    parameters' original names, the compile id, the backend id),
    ``_param_name_to_source``, and each input placeholder's
    ``_dynamo_source`` (aot_autograd finds the static inputs from them; lost,
    cudagraphs re-record on every call: pytorch#140395). split_module names a
    submodule's placeholders after the values they receive, so a placeholder
    named like one of the original graph's is that input; any other takes a
    value computed by an earlier bucket and has no source."""
    graph = getattr(called, "graph", None)
    if graph is None:
        return []
    out = []
    returned = next((n.args[0] for n in graph.nodes if n.op == "output"), None)
    if not isinstance(returned, (tuple, list)):
        out.append(Violation("SPL-10", f"backend call {i} should get a submodule returning a flat tuple (what "
                                        "AOTAutograd-based compilers take), its graph returns a single value"))
    elif any(isinstance(v, (tuple, list)) for v in returned):
        out.append(Violation("SPL-10", f"backend call {i} should get a submodule returning a flat tuple (what "
                                        "AOTAutograd-based compilers take), its graph returns a tuple holding a tuple"))
    lost = []
    want_meta, got_meta = getattr(gm, "meta", None) or {}, getattr(called, "meta", None) or {}
    missing = [k for k in want_meta if k not in got_meta]
    changed = [k for k in want_meta if k in got_meta and not _same(got_meta[k], want_meta[k])]
    if missing:
        lost.append(f"meta lacks {sorted(missing)}")
    if changed:
        lost.append(f"meta holds other values for {sorted(changed)}")
    if hasattr(gm, "_param_name_to_source"):
        if not hasattr(called, "_param_name_to_source"):
            lost.append("it has no _param_name_to_source")
        elif not _same(called._param_name_to_source, gm._param_name_to_source):
            lost.append("its _param_name_to_source differs")
    sources = {n.name: getattr(n, "_dynamo_source", None) for n in gm.graph.nodes if n.op == "placeholder"}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    unsourced = [n.name for n in placeholders if n.name in sources and not _same(getattr(n, "_dynamo_source", None), sources[n.name])]
    foreign = [n.name for n in placeholders if n.name not in sources and getattr(n, "_dynamo_source", None) is not None]
    if unsourced:
        lost.append(f"its placeholders {unsourced} do not carry the original inputs' _dynamo_source")
    if foreign:
        lost.append(f"its placeholders {foreign}, which take values computed by earlier buckets, carry a _dynamo_source")
    if lost:
        out.append(Violation("SPL-10", f"backend call {i} should get a submodule carrying the original graph "
                                        f"module's metadata and its inputs' sources, but {'; '.join(lost)}"))
    return out


def _same(got, want) -> bool:
    if got is want:
        return True
    try:
        return type(got) is type(want) and bool(got == want)
    except Exception:  # noqa: BLE001 - a value that cannot be compared is not the same one
        return False


def _minus(items, remove):
    """Multiset ``items - remove``, or None when ``remove`` is not contained."""
    rest = list(items)
    for item in remove:
        if item not in rest:
            return None
        rest.remove(item)
    return rest


def _op_count(module, attrs=True) -> int | None:
    graph = getattr(module, "graph", None)
    if graph is None:
        return None
    skipped = ("placeholder", "output") if attrs else ("placeholder", "output", "get_attr")
    return sum(1 for n in graph.nodes if n.op not in skipped)


# --------------------------------------------------------------------------- SPL-17, SPL-18


def layout(tensor) -> tuple:
    """What a compiler reads off an example input besides its values:
    ``(shape, strides, dtype, device, requires_grad)``. A stride of a
    dimension of size 1 (or of an empty tensor) addresses nothing and is
    left out (None): fake propagation and eager kernels may set it either
    way, and no kernel can tell."""
    shape = tuple(tensor.shape)
    empty = tensor.numel() == 0
    strides = tuple(None if empty or size == 1 else stride for size, stride in zip(shape, tensor.stride(), strict=True))
    return shape, strides, tensor.dtype, tensor.device, tensor.requires_grad


def run_time_layouts(gm, example_inputs) -> dict:
    """``op node name -> {value name: layout}``: every tensor the graph holds
    just before that node runs, in a run of ``gm`` on the example inputs in
    grad mode (the run whose activations a bucket's compile must be handed
    the likes of). Taken before each node, not once per value, because a
    later in-place op may change a value's ``requires_grad``; a bucket's
    inputs are what they are where the bucket starts."""
    import torch

    before: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            if n.op not in ("placeholder", "output"):
                before[n.name] = {k.name: layout(v) for k, v in self.env.items() if isinstance(v, torch.Tensor)}
            return super().run_node(n)

    with torch.enable_grad():
        Recorder(gm).run(*example_inputs)
    return before


def check_example_inputs(buckets, calls, gm, layouts) -> list[Violation]:
    """SPL-17: with k > 1 buckets, each backend call's example inputs are,
    placeholder by placeholder, what its bucket takes at run time: the same
    shape, strides, dtype, device and ``requires_grad`` as the value the run
    (``layouts``: :func:`run_time_layouts`) holds where the bucket starts.
    split_module names a submodule's placeholders after the values they
    take; one named after a ``get_attr`` takes that attribute. Calls whose
    count or placeholders do not line up are SPL-10's to judge."""
    import torch

    if len(buckets) < 2 or len(calls) != len(buckets):
        return []
    out = []
    for i, (b, (called, inputs)) in enumerate(zip(buckets, calls, strict=True)):
        graph = getattr(called, "graph", None)
        if graph is None or not b.nodes or b.nodes[0] not in layouts:
            continue
        placeholders = [n.name for n in graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(inputs):
            continue
        at_start = layouts[b.nodes[0]]
        wrong = []
        for name, given in zip(placeholders, inputs, strict=True):
            want = at_start.get(name)
            if want is None:
                attr = _attr_value(gm, name)
                want = layout(attr) if isinstance(attr, torch.Tensor) else None
            if want is None or not isinstance(given, torch.Tensor):
                continue
            got = layout(given)
            if got != want:
                wrong.append(f"{name}: {_describe(want, got)}")
        if wrong:
            out.append(Violation("SPL-17", f"backend call {i} should get example inputs laid out as bucket {i}'s inputs "
                                           f"are at run time, but {short(wrong, 4)}", evidence=tuple(wrong)))
    return out


def dynamo_value_sizes(gm) -> dict:
    """``value name -> sizes`` in the graph Dynamo captured: a tensor's
    sizes as Dynamo's metadata gives them (a symbolic size as its symbol,
    ``"(s0, 4)"``), a size input's symbol (``"s0"``). Values without
    Dynamo's metadata are left out."""
    import torch

    sizes = {}
    for node in gm.graph.nodes:
        value = node.meta.get("example_value")
        if isinstance(value, torch.Tensor):
            sizes[node.name] = _sizes(value)
        elif isinstance(value, torch.SymInt):
            sizes[node.name] = str(value)
    return sizes


def _sizes(tensor) -> str:
    return "(" + ", ".join(str(s) for s in tensor.shape) + ("," if tensor.dim() == 1 else "") + ")"


def check_symbolic_example_inputs(calls, sizes) -> list[Violation]:
    """SPL-17 inside Dynamo's compile (``calls``: ``(submodule, example
    inputs, the compile's fake mode at the call)``; ``sizes``:
    :func:`dynamo_value_sizes` of the captured graph): every tensor a
    backend call is handed is a fake of the compile's fake mode, with the
    sizes Dynamo's graph gives the value its placeholder takes, symbolic
    sizes as the same symbols. A real tensor, or a fake of another mode,
    has static sizes: the bucket is compiled for one length."""
    import torch

    out = []
    for i, (called, inputs, fake_mode) in enumerate(calls):
        graph = getattr(called, "graph", None)
        if graph is None:
            continue
        placeholders = [n.name for n in graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(inputs):
            continue  # SPL-10's to judge
        wrong = []
        for name, given in zip(placeholders, inputs, strict=True):
            if not isinstance(given, torch.Tensor):
                continue
            want = sizes.get(name)
            got = _sizes(given)
            mode = getattr(given, "fake_mode", None)
            if fake_mode is not None and mode is not fake_mode:
                kind = "a real tensor" if mode is None else "a fake of another fake mode than the compile's"
                wrong.append(f"{name}: {kind} of sizes {got}" + (f" where Dynamo's graph has {want}" if want else ""))
            elif want is not None and got != want:
                wrong.append(f"{name}: sizes {got} where Dynamo's graph has {want}")
        if wrong:
            out.append(Violation("SPL-17", f"inside Dynamo's compile, backend call {i} should get fakes of the compile's "
                                           f"fake mode with the sizes of Dynamo's graph (symbolic ones kept), but "
                                           f"{short(wrong, 3)}", evidence=tuple(wrong)))
    return out


_LAYOUT_FIELDS = ("shape", "strides", "dtype", "device", "requires_grad")


def _describe(want, got) -> str:
    return ", ".join(f"{field} {w} at run time, {g} handed to the backend"
                     for field, w, g in zip(_LAYOUT_FIELDS, want, got, strict=True) if w != g)


def compile_context() -> tuple:
    """What of the autograd and autocast state a compiler could change
    behind the user's back: ``(grad mode, CPU autocast, CPU autocast dtype)``."""
    import torch

    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
        cpu = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
    else:
        cpu = (torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype())
    return (torch.is_grad_enabled(), *cpu)


def check_compile_context(caller, during_calls, after, packed) -> list[Violation]:
    """SPL-18: compiling the buckets has no effect the user can see. Each
    backend call runs in the caller's grad mode and autocast state
    (``during_calls``, as :func:`compile_context`), the state is the
    caller's again after the split (``after``), and no saved-tensors hook
    the caller has active fires while the split propagates example values
    and compiles (``packed``: how many times the caller's pack hook ran)."""
    out = []
    named = ("grad mode", "CPU autocast", "CPU autocast dtype")
    for i, state in enumerate(during_calls):
        if state != caller:
            diff = ", ".join(f"{n} {c} around the split, {s} in the call" for n, c, s in zip(named, caller, state, strict=True) if c != s)
            out.append(Violation("SPL-18", f"backend call {i} should run in the caller's grad mode and autocast state, but {diff}"))
            break
    if after != caller:
        diff = ", ".join(f"{n} {c} before, {a} after" for n, c, a in zip(named, caller, after, strict=True) if c != a)
        out.append(Violation("SPL-18", f"the split should leave the caller's grad mode and autocast state as it found them, but {diff}"))
    if packed:
        out.append(Violation("SPL-18", f"the caller's saved-tensors pack hook should not fire while the split compiles "
                                       f"its buckets (nothing of the user's model runs then), it fired {packed} times"))
    return out


def check_compiler_configs(configs: dict, got: list) -> list[Violation]:
    """SPL-19: the keyword arguments the split was asked to compile with
    (``configs``) reach every backend call: ``got`` holds each call's
    keyword arguments, in order."""
    out = []
    for i, kwargs in enumerate(got):
        missing = sorted(k for k in configs if k not in kwargs)
        changed = sorted(k for k in configs if k in kwargs and not _same(kwargs[k], configs[k]))
        foreign = sorted(k for k in kwargs if k not in configs)
        if missing or changed or foreign:
            what = "; ".join(f"{label} {names}" for label, names in (
                ("it lacks", missing), ("it gets other values for", changed), ("it gets what was not asked for:", foreign)) if names)
            out.append(Violation("SPL-19", f"backend call {i} of {len(got)} should get the compiler configs the split was "
                                           f"asked to compile with ({sorted(configs)}), but {what}"))
    return out


# --------------------------------------------------------------------------- SPL-11, SPL-12


def evaluate(fn, example_inputs, wrt):
    """Outputs of ``fn(*example_inputs)`` and gradients of the sum of all
    floating outputs with respect to the tensors ``wrt``."""
    import torch

    outputs = fn(*example_inputs)
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    outputs = list(outputs)
    loss = sum(o.float().sum() for o in outputs if isinstance(o, torch.Tensor) and o.is_floating_point())
    # no floating tensor among the outputs (a tuple left wrapped): no loss,
    # no gradients, and the output kept as it is, for compare to name
    grads = torch.autograd.grad(loss, wrt, allow_unused=True) if wrt and isinstance(loss, torch.Tensor) else (None,) * len(wrt)
    return [o.detach() if isinstance(o, torch.Tensor) else o for o in outputs], [None if g is None else g.detach() for g in grads]


def compare(expected, got, what: str, inv: str, exact=False) -> list[Violation]:
    import torch

    (e_out, e_grad), (g_out, g_grad) = expected, got
    if len(e_out) != len(g_out):
        return [Violation(inv, f"{what}: expected {len(e_out)} outputs, got {len(g_out)}")]
    for label, exp, act in (("output", e_out, g_out), ("gradient", e_grad, g_grad)):
        for i, (a, b) in enumerate(zip(exp, act, strict=False)):
            if (a is None) != (b is None):
                return [Violation(inv, f"{what}: {label} {i} expected {'none' if a is None else 'a tensor'}, got {'none' if b is None else 'a tensor'}")]
            if a is None:
                continue
            if isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
                return [Violation(inv, f"{what}: {label} {i} should be a tensor, as the original graph's is, got a {type(b).__name__}")]
            same = torch.equal(a, b) if exact else (a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b, rtol=1e-4, atol=1e-5))
            if not same:
                diff = (a.float() - b.float()).abs().max().item() if a.shape == b.shape else f"shape {tuple(b.shape)} vs {tuple(a.shape)}"
                return [Violation(inv, f"{what}: {label} {i} differs from the original graph's (max abs difference {diff})")]
    return []


# --------------------------------------------------------------------------- SPL-14


def nested_meta(gm) -> dict:
    """The ``meta`` of each graph module held by ``gm`` (a higher-order op's
    body), by attribute name, copied: what a split must leave as it is."""
    import torch

    return {name: dict(m.meta) for name, m in gm.named_children() if isinstance(m, torch.fx.GraphModule)}


def check_nested_meta(bodies: dict, split_module) -> list[Violation]:
    """SPL-10 for nested subgraphs: every body of ``bodies``
    (:func:`nested_meta` of the captured graph) that the split module holds,
    at its top level or inside a submodule, keeps its own ``meta``, never
    the captured graph's (torch 2.8-2.12 gave every child of the split
    module the captured graph's metadata, HOP bodies included, losing
    their own: pytorch#179496)."""
    import torch

    out = []
    for path, module in split_module.named_modules():
        name = path.rpartition(".")[2]
        if name in bodies and isinstance(module, torch.fx.GraphModule) and dict(module.meta) != bodies[name]:
            out.append(Violation("SPL-10", f"the higher-order op's body {path} has meta keys {sorted(module.meta)} "
                                           f"after the split, not its own {sorted(bodies[name])}"))
    return out


def check_higher_order(facts, result, error, bucket_cap, first_cap, expected, example_inputs, wrt,
                       bodies=None, may_reject=False) -> list[Violation]:
    """SPL-14 on a graph with a higher-order op: the split ``result`` (None
    when it raised ``error``) is a valid plan computing ``expected``, or, for
    an implementation that rejects such graphs (``may_reject``: torch before
    2.6, or one that says so), the op was rejected with a NotImplementedError
    that says why; and the op's body keeps its own metadata (``bodies``,
    SPL-10)."""
    if result is None:
        return check_higher_order_rejected(error, may_reject)
    found = check_plan(facts, result.buckets, bucket_cap, first_cap, ids=("SPL-2", "SPL-6"))
    found += compare(expected, evaluate(result.compiled, example_inputs, wrt), "the split module", "SPL-11")
    return ([Violation("SPL-14", f"with a higher-order op, {v}") for v in found]
            + check_nested_meta(bodies or {}, result.compiled))


def check_higher_order_rejected(error, may_reject: bool) -> list[Violation]:
    """SPL-14 on a split of a graph with a higher-order op that raised
    ``error``: a clear NotImplementedError where the implementation rejects
    such graphs (``may_reject``), a FAIL where it splits them."""
    what = "{}: {}".format(*error_of(error))
    if not may_reject:
        return [Violation("SPL-14", f"a graph with a higher-order op should be split (DDPOptimizer splits them from torch "
                                    f"2.6 on), got {what}", error=error_of(error))]
    if isinstance(error, NotImplementedError):
        return [] if str(error).strip() else [Violation("SPL-14", "NotImplementedError for a higher-order op should say why")]
    return [Violation("SPL-14", f"a graph with a higher-order op should be split or rejected with NotImplementedError, "
                                f"got {what}", error=error_of(error))]
