"""Annotation checkers (ANN-1..6). ANN-7 and ANN-8 need Dynamo and live in
:func:`check_dynamo_effect` and :func:`check_dynamo_specialisation`."""

from __future__ import annotations

import functools
import itertools
import re

from . import Violation, short
from .traversal import _unique_children, dfs_preorder

MANAGED = "_is_fsdp_managed_module"
ORIG_PARAMS = "_fsdp_use_orig_params"
ANNOTATIONS = (MANAGED, ORIG_PARAMS)


def _entry(value):
    if isinstance(value, dict):
        return ("dict", tuple((k, id(v)) for k, v in value.items()))
    if isinstance(value, (bool, int, float, str, type(None))):
        return ("value", type(value), value)
    return ("obj", id(value))


#: where torch's forwarding wrappers keep the module they wrap: a read of
#: an attribute the wrapper does not hold goes on to it (``OptimizedModule``
#: from ``torch.compile(module)``, which forwards writes too; the
#: activation-checkpointing ``checkpoint_wrapper``)
WRAPPED = {"OptimizedModule": "_orig_mod", "CheckpointWrapper": "_checkpoint_wrapped_module",
           "OffloadWrapper": "_checkpoint_wrapped_module"}


def read_flag(module, name: str, unset="<unset>"):
    """A Dynamo flag as torch reads it (``getattr``): the module's own entry,
    else, through each forwarding wrapper, the wrapped module's. Never a
    class attribute: the spec's flags are set on instances."""
    seen = set()
    while id(module) not in seen:
        seen.add(id(module))
        if name in module.__dict__:
            return module.__dict__[name]
        # by the class's lineage: fully_shard swaps in a subclass of its own
        # (FSDPOptimizedModule), which forwards as its base does
        inner = next((WRAPPED[c.__name__] for c in type(module).__mro__ if c.__name__ in WRAPPED), None)
        module = module.__dict__.get("_modules", {}).get(inner) if inner else None
        if module is None:
            return unset
    return unset


def snapshot(tree) -> list[dict]:
    """Per module: every ``__dict__`` entry (registries by content identity)."""
    return [{k: _entry(v) for k, v in m.__dict__.items()} for m in tree.modules]


def _parents(tree) -> dict[int, list[int]]:
    index = {id(m): i for i, m in enumerate(tree.modules)}
    parents: dict[int, list[int]] = {i: [] for i in range(len(tree.modules))}
    for i, m in enumerate(tree.modules):
        for child in _unique_children(m):
            parents[index[id(child)]].append(i)
    return parents


def _under_ignored(tree) -> set[int]:
    """Modules with an ignored strict ancestor on some path from the root."""
    index = {id(m): i for i, m in enumerate(tree.modules)}
    reach = {index[id(m)] for m in dfs_preorder(tree.root)}
    parents = _parents(tree)
    below: set[int] = set()
    for i in range(len(tree.modules)):  # children have higher indices: topological order
        if i in reach and any(p in reach and (p in tree.spec.ignored or p in below) for p in parents[i]):
            below.add(i)
    return below


def check_annotated(tree, before, use_orig_params: bool) -> list[Violation]:
    """ANN-1..4 and ANN-6 after one ``annotate(root, ignored, use_orig_params)``;
    ``before`` is a :func:`snapshot` taken first."""
    out: list[Violation] = []
    index = {id(m): i for i, m in enumerate(tree.modules)}
    reachable = {index[id(m)] for m in dfs_preorder(tree.root)}
    ignored = tree.spec.ignored
    below = _under_ignored(tree)
    shared = shared_modules(tree)
    wrong: dict[str, list[str]] = {"ANN-1": [], "ANN-3": [], "ANN-6": []}
    for i, module in enumerate(tree.modules):
        if i not in reachable or i in ignored:
            continue
        got = (read_flag(module, MANAGED), read_flag(module, ORIG_PARAMS))
        if got[0] is True and got[1] is use_orig_params:
            continue
        desc = f"m{i} ({MANAGED}={got[0]!r}, {ORIG_PARAMS}={got[1]!r})"
        wrong["ANN-3" if i in below else "ANN-1"].append(desc)
        if i in shared:
            wrong["ANN-6"].append(desc)
    statements = {
        "ANN-1": f"expected every non-ignored module to be managed with use_orig_params={use_orig_params}",
        "ANN-3": "expected descendants of ignored modules to be annotated too",
        "ANN-6": "expected shared submodules to be annotated like any other",
    }
    for inv, bad in wrong.items():
        if bad:
            out.append(Violation(inv, f"{statements[inv]}; got {short(bad, 6)}"))

    after = snapshot(tree)
    changed_ignored, changed_other = [], []
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if i in ignored and i in reachable:
            if a != b:
                changed_ignored.append(f"m{i}: {_diff_keys(b, a)}")
            continue
        strip = {k: v for k, v in a.items() if k not in ANNOTATIONS}
        base = {k: v for k, v in b.items() if k not in ANNOTATIONS}
        if strip != base:
            changed_other.append(f"m{i}: {_diff_keys(base, strip)}")
    if changed_ignored:
        out.append(Violation("ANN-2", f"expected ignored modules untouched; changed {short(changed_ignored, 6)}"))
    if changed_other:
        out.append(
            Violation("ANN-4", f"expected nothing but the two annotations to change; changed {short(changed_other, 6)}")
        )
    return out


def shared_modules(tree) -> set[int]:
    """Indices of reachable modules registered under more than one parent."""
    return {i for i, ps in _parents(tree).items() if len(ps) > 1}


def check_shared_annotated(tree, use_orig_params: bool) -> list[Violation]:
    """ANN-6 alone: every shared, non-ignored module carries both annotations,
    whichever of its parents (ignored or not) a walk reaches it through."""
    bad = []
    for i in sorted(shared_modules(tree) - set(tree.spec.ignored)):
        module = tree.modules[i]
        got = (read_flag(module, MANAGED), read_flag(module, ORIG_PARAMS))
        if got != (True, use_orig_params) or not isinstance(got[1], bool):
            bad.append(f"m{i} ({MANAGED}={got[0]!r}, {ORIG_PARAMS}={got[1]!r})")
    if bad:
        return [Violation("ANN-6", f"expected shared submodules to be annotated like any other; got {short(bad, 6)}")]
    return []


def _diff_keys(before: dict, after: dict) -> str:
    keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return ", ".join(keys)


def check_idempotent(tree, once, twice, flipped, flag: bool) -> list[Violation]:
    """ANN-5: ``once``/``twice`` are snapshots after annotating once and twice
    with ``flag``; ``flipped`` after annotating again with ``not flag``."""
    out = []
    if once != twice:
        diffs = [f"m{i}: {_diff_keys(a, b)}" for i, (a, b) in enumerate(zip(once, twice, strict=True)) if a != b]
        out.append(Violation("ANN-5", f"expected a second annotation to change nothing; changed {short(diffs, 6)}"))
    stale = []
    index = {id(m): i for i, m in enumerate(tree.modules)}
    for m in dfs_preorder(tree.root):
        i = index[id(m)]
        if i in tree.spec.ignored:
            continue
        if read_flag(m, ORIG_PARAMS, None) is not (not flag):
            stale.append(f"m{i} ({ORIG_PARAMS}={read_flag(m, ORIG_PARAMS, None)!r})")
    if stale:
        out.append(
            Violation("ANN-5", f"expected re-annotating with use_orig_params={not flag} to update the flag; got {short(stale, 6)}")
        )
    return out


def diff_against_reference(ref_tree, tree) -> list[Violation]:
    """Per module, the two annotations after the reference and the implementation ran."""
    below = _under_ignored(tree)
    diffs: dict[str, list[str]] = {"ANN-1": [], "ANN-2": [], "ANN-3": []}
    for i, (r, g) in enumerate(zip(ref_tree.modules, tree.modules, strict=True)):
        want = tuple(read_flag(r, k) for k in ANNOTATIONS)
        got = tuple(read_flag(g, k) for k in ANNOTATIONS)
        if want != got:
            inv = "ANN-2" if i in tree.spec.ignored else "ANN-3" if i in below else "ANN-1"
            diffs[inv].append(f"m{i}: reference {want}, implementation {got}")
    return [Violation(inv, f"annotations differ from the reference: {short(bad, 6)}") for inv, bad in diffs.items() if bad]


def _models():
    import torch
    from torch import nn

    class Nested(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            return self.head(self.inner(x) + x)

    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.Linear(4, 4)
            self.again = self.block  # one module under two names
            self.scale = nn.Parameter(torch.ones(4))

        def forward(self, x):
            return self.again(self.block(x)) * self.scale

    return {
        "mlp": lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)),
        "nested": Nested,
        "shared": Shared,
    }


def _guard_source(node):
    """The guard source Dynamo gave a placeholder's graph input, or None.
    (A property on recent torch, a method on older releases.)"""
    source = getattr(node.meta.get("grapharg"), "source", None)
    if source is None:
        return None
    guard_source = source.guard_source
    return guard_source() if callable(guard_source) else guard_source


def _compile_once(module, x):
    """Compile and run ``module`` once; ``(compiled, output, graphs)`` where
    each graph is a list of ``(guard source, example input)`` per placeholder
    (read in the backend: Dynamo drops the metadata once it returns)."""
    import torch

    graphs = []

    def backend(gm, example_inputs):
        placeholders = [_guard_source(n) for n in gm.graph.nodes if n.op == "placeholder"]
        graphs.append(list(zip(placeholders, example_inputs, strict=False)))
        return gm.forward

    compiled = torch.compile(module, backend=backend)
    return compiled, compiled(x), graphs


@functools.cache
def dynamo_unsupported() -> str | None:
    """Why this torch's Dynamo cannot show ANN-7, or None: a probe of torch
    alone, on a module the suite marks by hand, before any implementation runs.

    torch 2.1's Dynamo keeps the parameters of FSDP-managed modules as
    attributes instead of graph inputs; the FSDP guard source that tells
    managed parameters apart exists from the release that added
    ``skip_fsdp_guards``."""
    import torch
    from torch import nn

    from ..core.torch_support import compile_unsupported

    reason = compile_unsupported()
    if reason is not None:
        return reason
    module = nn.Linear(2, 2)
    module._is_fsdp_managed_module = True
    module._fsdp_use_orig_params = True
    torch._dynamo.reset()
    try:
        _, _, graphs = _compile_once(module, torch.randn(1, 2))
    finally:
        torch._dynamo.reset()
    lifted = {id(value): source for graph in graphs for source, value in graph}
    params = list(module.parameters())
    if len(graphs) != 1 or any(id(p) not in lifted for p in params):
        return (f"torch {torch.__version__}'s Dynamo does not lift the parameters of a module marked "
                "FSDP-managed as graph inputs")
    if not all(getattr(lifted[id(p)], "is_fsdp_module", lambda: False)() for p in params):
        return (f"torch {torch.__version__}'s Dynamo gives the parameters of a module marked FSDP-managed "
                "no FSDP guard source")
    return None


def check_dynamo_effect(annotation, model: str) -> list[Violation]:
    """ANN-7: after ``annotate(m, set(), True)``, ``torch.compile`` traces ``m``
    in one graph with its parameters as graph inputs that Dynamo sources from
    FSDP-managed modules (the guard source that drops the guards FSDP makes
    unnecessary), and swapping a parameter between calls gives eager-equal
    results without a recompile.

    Since Dynamo inlines nn modules it lifts every module's parameters, so
    lifting alone says nothing: the source is what an annotation changes."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    module = _models()[model]()
    annotation.annotate(module, set(), True)

    torch._dynamo.reset()
    try:
        x = torch.randn(3, 4)
        compiled, first, graphs = _compile_once(module, x)
        if not torch.allclose(first, module(x)):
            return [Violation("ANN-7", f"{model}: compiled output differs from eager")]
        named = list(module.named_parameters())
        counts = [len(graph) for graph in graphs]
        if len(graphs) != 1 or counts[0] < 1 + len(named):
            return [
                Violation(
                    "ANN-7",
                    f"{model}: expected one graph taking the input and {len(named)} parameters as placeholders, "
                    f"got graphs with placeholder counts {counts}",
                )
            ]
        lifted = {id(value): source for source, value in graphs[0]}
        unmanaged = []
        for name, param in named:
            source = lifted.get(id(param), "not a graph input")
            if not getattr(source, "is_fsdp_module", lambda: False)():
                unmanaged.append(f"{name} ({getattr(source, 'name', source)})")
        if unmanaged:
            return [
                Violation(
                    "ANN-7",
                    f"{model}: expected every parameter to reach the graph from an FSDP-managed module "
                    f"(Dynamo guard source *_FSDP_MODULE); got {short(unmanaged, 6)}",
                )
            ]
        name, old = named[0]
        owner = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
        setattr(owner, name.rpartition(".")[2], nn.Parameter(torch.randn_like(old)))
        second = compiled(x)
        if not torch.allclose(second, module(x)):
            return [Violation("ANN-7", f"{model}: after swapping {name}, compiled output differs from eager")]
        if len(graphs) != 1:
            return [Violation("ANN-7", f"{model}: swapping {name} recompiled ({len(graphs)} graphs)")]
    finally:
        torch._dynamo.reset()
    return []


def _specialising_models():
    """ANN-8's models: a block whose forward reads int attributes (a head
    count, a tuple shape, a scale) in shape arithmetic and in the result, as
    attention blocks do, and one that reads none."""
    from torch import nn

    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.heads = 2
            self.shape = (2, 4)

        def forward(self, x):
            y = self.lin(x)
            return y.view(y.shape[0], self.heads, -1).sum(-1) * self.heads + y.view(-1, *self.shape).sum(-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = Heads()
            self.scale = 3

        def forward(self, x):
            return self.attn(x) * self.scale

    return {
        "attention": Attention,
        "mlp": lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)),
    }


#: the batch sizes ANN-8 calls each compiled module at: a size change after
#: the first call is where a dynamic=True compile must not recompile
_BATCH_SIZES = (3, 5, 7)

#: ``._modules['attn']``, ``._parameters['w']``: how recent releases spell an attribute path in a guard source
_SOURCE_PATH = re.compile(r"\._(?:modules|parameters|buffers)\['([^']+)'\]")


#: the frame's local holding the compiled module: ``self`` in its ``forward``,
#: ``fn`` where a release traces a managed module through the call that wraps it (2.6)
_MODULE_LOCAL = re.compile(r"^L\['(?:self|fn)'\]")
#: the module's one positional input: ``x`` in its ``forward``, ``args[0]`` where a
#: release traces a managed module through ``Module._call_impl(*args)`` (2.5)
_INPUT_LOCAL = re.compile(r"^L\['(?:x|args)'\](?:\[0\])?")


def _input_name(node) -> str:
    """A placeholder's graph input as a Python expression over the frame's
    locals (``self.attn.heads``, ``x.size()[0]``): its guard source's name,
    spelled the same on every release (the module ``self`` whichever local
    holds it, the input ``x`` whichever local holds it), else the node's name."""
    source = getattr(node.meta.get("grapharg"), "source", None)
    if source is None:
        return node.name
    name = source.name() if callable(source.name) else source.name
    name = _INPUT_LOCAL.sub("x", _MODULE_LOCAL.sub("self", _SOURCE_PATH.sub(r".\1", name)))
    return re.sub(r"L\['(\w+)'\]", r"\1", name)


def _dynamic_graphs(module) -> tuple[list[list[tuple[str, str]]], list[str]]:
    """Compile ``module`` with ``dynamic=True`` and call it at each batch
    size: ``(graphs, mismatches)``, each graph the ``(name, type)`` of every
    graph input that is not one of the module's parameters or buffers (those
    are ANN-7's), each mismatch a batch size whose compiled output differs
    from eager. Read in the backend: Dynamo drops the metadata once it returns."""
    import torch

    own = {id(t) for t in itertools.chain(module.parameters(), module.buffers())}
    graphs = []

    def backend(gm, example_inputs):
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        graphs.append([(_input_name(node), type(node.meta.get("example_value", value)).__name__)
                       for node, value in zip(placeholders, example_inputs, strict=False) if id(value) not in own])
        return gm.forward

    compiled = torch.compile(module, backend=backend, dynamic=True)
    mismatches = []
    for size in _BATCH_SIZES:
        x = torch.randn(size, 8)
        if not torch.allclose(compiled(x), module(x)):
            mismatches.append(str(size))
    return graphs, mismatches


def check_dynamo_specialisation(annotation, model: str) -> list[Violation]:
    """ANN-8: after ``annotate(m, set(), True)``, ``torch.compile(m,
    dynamic=True)`` called at several batch sizes gives eager's results and
    loses no specialisation the same module unannotated keeps: no more
    graphs, and no graph input the plain module's graphs do not take, apart
    from the parameters and buffers (ANN-7 is about those). A graph input
    the plain module takes and the annotated one does not (an int the plain
    module's graph takes symbolically, as some releases do, and the
    annotated one specializes) loses nothing. Dynamo specializes the int attributes of every ``nn.Module`` as
    constants (``torch._dynamo.config.allow_unspec_int_on_nn_module`` is off
    by default, its comment: "Dynamo will always specialize on int members
    of NN module"); the FSDP annotation only drops guards that FSDP makes
    unnecessary (``skip_fsdp_guards``), so a managed module's int attribute
    lifted as a symbolic graph input is specialisation lost, a plain
    module's kept. The control is the same module compiled without the
    annotation, the implementation never called on it."""
    import torch

    torch.manual_seed(0)
    factory = _specialising_models()[model]
    plain = factory()
    managed = factory()
    managed.load_state_dict(plain.state_dict())
    annotation.annotate(managed, set(), True)
    sizes = ", ".join(map(str, _BATCH_SIZES))
    torch._dynamo.reset()
    try:
        plain_graphs, _ = _dynamic_graphs(plain)
        torch._dynamo.reset()
        managed_graphs, mismatches = _dynamic_graphs(managed)
    finally:
        torch._dynamo.reset()
    violations = []
    if mismatches:
        violations.append(Violation("ANN-8", f"{model}: compiled with dynamic=True, the annotated module's output "
                                             f"differs from eager at batch size {', '.join(mismatches)}"))
    if len(managed_graphs) > len(plain_graphs):
        violations.append(Violation("ANN-8", f"{model}: compiled with dynamic=True and called at batch sizes {sizes}, "
                                             f"the annotated module compiled {len(managed_graphs)} graphs, the plain "
                                             f"module {len(plain_graphs)}"))
    extra = set(itertools.chain.from_iterable(managed_graphs)) - set(itertools.chain.from_iterable(plain_graphs))
    if extra:
        listed = ", ".join(f"{name} ({kind})" for name, kind in sorted(extra))
        violations.append(Violation("ANN-8", f"{model}: compiled with dynamic=True, the annotated module's graphs "
                                             f"take inputs the plain module's do not: {listed}"))
    return violations
