"""torch.fx-traceable models for the exec-order area: a pure-data spec, its
builder, tracer subclasses, and hypothesis strategies.

A ``ModelSpec`` is plain tuples and strings, so an example prints and replays
without torch (``to_source()``); ``build_model`` turns it into modules whose
forward is driven by the spec's *programs*. Everything a program does is
static Python control flow, so ``torch.fx`` traces it.

Module kinds: ``block`` (custom module running a program over its own
parameters, buffers and children), ``linear`` (``nn.Linear``, a leaf by default),
``act`` (``nn.ReLU``, parameter-free leaf), ``seq`` (``nn.Sequential`` of its
registered children), ``norm`` (``nn.BatchNorm1d``, a leaf with parameters and
buffers) and ``list`` (``nn.ModuleList``: a parameter-free container that is
never called itself; calling it from a block runs its members in turn). Module 0 is the root block; children always have higher
indices, and one module may be registered under several parents.

Program steps of a block (``pN`` is its own parameter N, ``cN`` child slot N):

``("call", c)``            ``x = cN(x)``
``("call_n", c, k)``       call child ``c`` ``k`` times
``("mul", p)``             ``x = x * pN`` (vector parameter)
``("linear", p)``          ``x = F.linear(x, pN)`` (matrix parameter)
``("addcmul", p, q)``      ``x = torch.addcmul(x, pP, pQ)`` (two uses in one op)
``("child_param", c, n)``  ``x = x * cC.<n>`` (a parent using a child's parameter)
``("relu",)``              parameter-free op
``("mode", a, b)``         root only: ``x = ca(x) if mode else cb(x)`` (needs ``concrete_args``)
``("kw_linear", p)``       ``F.linear(x, weight=pN)`` (a use passed by keyword)
``("stack_use", p)``       ``pN`` used only inside a list argument of ``torch.stack``
``("fail",)``              raises ``PlannedTraceError`` (for restore-on-exception checks)
``("buf", b)``             ``x = x * bN`` (a buffer read directly)
``("buf_param", b, p)``    ``x = torch.addcmul(x, bB, pP)`` (a buffer next to a parameter in one op)
``("child_buf", c, n)``    ``x = x * cC.<n>`` (a parent reading a child's buffer)
``("t_linear", p)``        ``x = F.linear(x, pP.t())`` (matrix read through a transpose view)
``("slice", p, k)``        ``x = x + pP[:k].sum()`` (read through a slice)
``("view", p)``            ``pP.view(...)`` used by ``mul``/``linear`` (read through a reshape view)

Buffers are ``(DIM,)`` tensors, ``"pbuf"`` persistent or ``"nbuf"`` not.
``ties`` make a block's parameter the very ``Parameter`` of another module
(``(module, param, source, source_name)``), so it is reachable under two names,
like tied input and output embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import strategies as st

DIM = 4
KINDS = ("block", "linear", "act", "seq", "norm", "list")
#: ``buffer_proxies``: buffers read in a forward become ``get_attr`` proxies,
#: as parameters always are (``proxy_buffer_attributes``, which transformers'
#: fx tracer sets), so a recorder meets buffer nodes among an op's inputs
TRACERS = ("default", "leaf_rules", "into_nn", "wrapping", "buffer_proxies")
#: upper bound on module calls per generated forward, so shared, repeatedly
#: called modules cannot blow a small spec up exponentially
CALL_BUDGET = 60


class PlannedTraceError(RuntimeError):
    """Raised by a ``("fail",)`` step: a forward that breaks half-way through a trace."""


@dataclass(frozen=True)
class ModelSpec:
    kinds: tuple[str, ...]
    children: tuple[tuple[int, ...], ...]  # registered children per module
    params: tuple[tuple[str, ...], ...] = ()  # per block: "vec" (D,) or "mat" (D, D)
    programs: tuple[tuple[tuple, ...], ...] = ()  # per block: steps
    tracer: str = "default"
    leaf_blocks: frozenset[int] = frozenset()  # blocks the tracer treats as leaves
    concrete_mode: bool | None = None  # concrete_args={"mode": ...} when not None
    buffers: tuple[tuple[str, ...], ...] = ()  # per block: "pbuf" | "nbuf"
    ties: tuple[tuple[int, int, int, str], ...] = ()  # (module, param, source, source_name)
    #: names of the root's parameters in place of p0, p1, ... (e.g. a Tensor method's name)
    root_names: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return len(self.kinds)

    def params_of(self, module: int) -> tuple[str, ...]:
        return self.params[module] if self.params else ()

    def program_of(self, module: int) -> tuple[tuple, ...]:
        return self.programs[module] if self.programs else ()

    def buffers_of(self, module: int) -> tuple[str, ...]:
        return self.buffers[module] if self.buffers else ()

    def concrete_args(self):
        return None if self.concrete_mode is None else {"mode": self.concrete_mode}

    def to_source(self) -> str:
        parts = [f"kinds={self.kinds!r}", f"children={self.children!r}"]
        if self.params:
            parts.append(f"params={self.params!r}")
        if self.programs:
            parts.append(f"programs={self.programs!r}")
        if self.tracer != "default":
            parts.append(f"tracer={self.tracer!r}")
        if self.leaf_blocks:
            parts.append(f"leaf_blocks=frozenset({sorted(self.leaf_blocks)!r})")
        if self.concrete_mode is not None:
            parts.append(f"concrete_mode={self.concrete_mode!r}")
        if any(self.buffers):
            parts.append(f"buffers={self.buffers!r}")
        if self.ties:
            parts.append(f"ties={self.ties!r}")
        if self.root_names:
            parts.append(f"root_names={self.root_names!r}")
        return "ModelSpec(" + ", ".join(parts) + ")"


def with_failure(spec: ModelSpec, block: int) -> ModelSpec:
    """``spec`` whose ``block`` (and, as a backstop, the root) raise at the end
    of their program, so a trace stops after some modules were recorded."""
    programs = [list(spec.program_of(i)) for i in range(spec.size)]
    for i in {block, 0}:
        if spec.kinds[i] == "block":
            programs[i].append(("fail",))
    return replace(spec, programs=tuple(tuple(p) for p in programs))


# --------------------------------------------------------------------------- build


def _classes():
    # torch is imported lazily: generators are importable by an idle plugin.
    global _CLASSES
    if _CLASSES is not None:
        return _CLASSES
    import torch
    import torch.nn.functional as F
    from torch import fx, nn

    class Block(nn.Module):
        """Runs a static program; see the module docstring for the steps."""

        def __init__(self, param_kinds, program, buffer_kinds=(), param_names=()):
            super().__init__()
            self._param_names = tuple(param_names) or tuple(f"p{n}" for n in range(len(param_kinds)))
            for n, kind in enumerate(param_kinds):
                shape = (DIM,) if kind == "vec" else (DIM, DIM)
                setattr(self, self._param_names[n], nn.Parameter(torch.randn(shape) * 0.5))
            for n, kind in enumerate(buffer_kinds):
                self.register_buffer(f"b{n}", torch.rand(DIM) + 0.5, persistent=kind == "pbuf")
            self._program = tuple(program)
            self._param_kinds = tuple(param_kinds)  # a proxy cannot tell its own shape

        def _param(self, n):
            return getattr(self, self._param_names[n])

        def forward(self, x, mode=True):
            for step in self._program:
                op = step[0]
                if op == "call":
                    x = _run_child(getattr(self, f"c{step[1]}"), x)
                elif op == "call_n":
                    for _ in range(step[2]):
                        x = _run_child(getattr(self, f"c{step[1]}"), x)
                elif op == "mul":
                    x = x * self._param(step[1])
                elif op == "linear":
                    x = F.linear(x, self._param(step[1]))
                elif op == "addcmul":
                    x = torch.addcmul(x, self._param(step[1]), self._param(step[2]))
                elif op == "child_param":
                    x = x * getattr(getattr(self, f"c{step[1]}"), step[2])
                elif op == "relu":
                    x = torch.relu(x)
                elif op == "mode":
                    x = _run_child(getattr(self, f"c{step[1] if mode else step[2]}"), x)
                elif op == "kw_linear":
                    x = F.linear(x, weight=self._param(step[1]))
                elif op == "stack_use":
                    x = x + torch.stack([x.sum(0), self._param(step[1])]).sum(0)
                elif op == "buf":
                    x = x * getattr(self, f"b{step[1]}")
                elif op == "buf_param":
                    x = torch.addcmul(x, getattr(self, f"b{step[1]}"), self._param(step[2]))
                elif op == "child_buf":
                    x = x * getattr(getattr(self, f"c{step[1]}"), step[2])
                elif op == "t_linear":
                    x = F.linear(x, self._param(step[1]).t())
                elif op == "slice":
                    x = x + self._param(step[1])[: step[2]].sum()
                elif op == "view":
                    param = self._param(step[1])
                    if self._param_kinds[step[1]] == "vec":
                        x = x * param.view(1, DIM)
                    else:
                        x = F.linear(x, param.view(DIM * DIM).view(DIM, DIM))
                elif op == "fail":
                    raise PlannedTraceError("planned failure half-way through the forward")
                else:
                    raise ValueError(f"unknown step {step!r}")
            return x

    def _run_child(child, x):
        # A ModuleList is never called: its members run in turn.
        pending = [child]
        while pending:
            module = pending.pop()
            if isinstance(module, nn.ModuleList):
                pending.extend(reversed(list(module)))
            else:
                x = module(x)
        return x

    class ChainLink(nn.Module):
        """One link of a long chain: a non-leaf wrapper around a leaf Linear."""

        def __init__(self, width):
            super().__init__()
            self.lin = nn.Linear(width, width)

        def forward(self, x):
            return self.lin(x).relu()

    class LeafRuleTracer(fx.Tracer):
        """Own leaf rules: given modules become leaves, and optionally
        ``nn.Linear``/``nn.ReLU`` are traced into instead of being leaves;
        ``proxy_buffers`` turns on ``proxy_buffer_attributes``."""

        def __init__(self, extra_leaves=(), trace_into_nn=False, proxy_buffers=False):
            super().__init__()
            self.extra_leaf_ids = frozenset(id(m) for m in extra_leaves)
            self.trace_into_nn = trace_into_nn
            if proxy_buffers:
                self.proxy_buffer_attributes = True

        def is_leaf_module(self, m, module_qualified_name):
            if id(m) in self.extra_leaf_ids:
                return True
            if self.trace_into_nn and isinstance(m, (nn.Linear, nn.ReLU)):
                return False
            return super().is_leaf_module(m, module_qualified_name)

    class WrappingTracer(LeafRuleTracer):
        """Overrides ``call_module``/``create_proxy`` in the class and counts
        them: a patch must wrap these overrides, not bypass them."""

        def __init__(self, extra_leaves=(), trace_into_nn=False):
            super().__init__(extra_leaves, trace_into_nn)
            self.counts = {"call_module": 0, "create_proxy": 0}

        def call_module(self, m, forward, args, kwargs):
            self.counts["call_module"] += 1
            return super().call_module(m, forward, args, kwargs)

        def create_proxy(
            self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None
        ):
            self.counts["create_proxy"] += 1
            return super().create_proxy(
                kind, target, args, kwargs, name, type_expr, proxy_factory_fn
            )

    _CLASSES = {
        "Block": Block,
        "ChainLink": ChainLink,
        "LeafRuleTracer": LeafRuleTracer,
        "WrappingTracer": WrappingTracer,
    }
    return _CLASSES


#: Not run state: the classes are built once a process (torch is imported
#: lazily) and hold nothing of the session that built them.
_CLASSES = None


def __getattr__(name):
    # The module classes are created on first use (torch imported lazily) but
    # are public names of this module, e.g. for isinstance checks.
    if name in ("Block", "ChainLink", "LeafRuleTracer", "WrappingTracer"):
        return _classes()[name]
    raise AttributeError(name)


@dataclass
class BuiltModel:
    spec: ModelSpec
    root: object
    modules: list  # spec index -> module

    def label(self, obj) -> str:
        for i, m in enumerate(self.modules):
            if m is obj:
                return f"m{i}"
        return type(obj).__name__

    def inputs(self, seed: int = 0):
        import torch

        gen = torch.Generator().manual_seed(seed)
        return (torch.randn(2, DIM, generator=gen),)


def build_model(spec: ModelSpec) -> BuiltModel:
    """Real modules for ``spec``, built from the last index to the first so
    every child exists before its parents (no recursion)."""
    from torch import nn

    classes = _classes()
    modules: list = [None] * spec.size
    for i in range(spec.size - 1, -1, -1):
        kind = spec.kinds[i]
        if kind == "block":
            names = spec.root_names if i == 0 else ()
            m = classes["Block"](spec.params_of(i), spec.program_of(i), spec.buffers_of(i), names)
            for slot, child in enumerate(spec.children[i]):
                m.add_module(f"c{slot}", modules[child])
        elif kind == "list":
            m = nn.ModuleList([modules[child] for child in spec.children[i]])
        elif kind == "seq":
            m = nn.Sequential()
            for slot, child in enumerate(spec.children[i]):
                m.add_module(str(slot), modules[child])
        elif kind == "linear":
            m = nn.Linear(DIM, DIM)
        elif kind == "act":
            m = nn.ReLU()
        elif kind == "norm":
            m = nn.BatchNorm1d(DIM)
        else:
            raise ValueError(f"unknown module kind {kind!r}")
        modules[i] = m
    for module, param, source, source_name in spec.ties:
        setattr(modules[module], modules[module]._param_names[param], getattr(modules[source], source_name))
    return BuiltModel(spec, modules[0], modules)


def make_tracer(spec: ModelSpec, built: BuiltModel):
    """A fresh tracer of the kind ``spec.tracer`` names, for ``built``."""
    from torch import fx

    classes = _classes()
    leaves = [built.modules[i] for i in sorted(spec.leaf_blocks)]
    if spec.tracer == "default":
        return fx.Tracer()
    if spec.tracer == "leaf_rules":
        return classes["LeafRuleTracer"](leaves)
    if spec.tracer == "into_nn":
        return classes["LeafRuleTracer"](leaves, trace_into_nn=True)
    if spec.tracer == "wrapping":
        return classes["WrappingTracer"](leaves, trace_into_nn=bool(len(leaves) % 2))
    if spec.tracer == "buffer_proxies":
        return classes["LeafRuleTracer"](leaves, proxy_buffers=True)
    raise ValueError(f"unknown tracer kind {spec.tracer!r}")


def make_leaf_tracer(leaves=(), trace_into_nn=False):
    """A ``LeafRuleTracer`` treating ``leaves`` as leaf modules."""
    return _classes()["LeafRuleTracer"](leaves, trace_into_nn)


def chain_model(n_modules: int, width: int = 2):
    """A flat chain of about ``n_modules`` modules: ``nn.Sequential`` of
    ``n_modules // 2`` non-leaf links, each wrapping a leaf ``nn.Linear``.
    Flat on purpose: fx's own tracing cost stays linear in it (a nested chain
    would recurse in fx, and its usage infos are quadratic by the spec)."""
    from torch import nn

    link = _classes()["ChainLink"]
    return nn.Sequential(*[link(width) for _ in range(max(1, n_modules // 2))])


def wide_leaf_model(n_params: int):
    """``(root, leaf)``: a root wrapping one module with ``n_params``
    parameters, to be traced as a leaf (``LeafRuleTracer([leaf])``): one
    module call, one graph node, so the recording's cost per parameter is
    all that grows."""
    import torch
    from torch import nn

    leaf = nn.Module()
    for n in range(n_params):
        leaf.register_parameter(f"w{n}", nn.Parameter(torch.zeros(1)))
    root = nn.Sequential(nn.Sequential(leaf))
    return root, leaf


# --------------------------------------------------------------------- strategies


def _call_cost(spec_kinds, children, programs, costs, i) -> int:
    kind = spec_kinds[i]
    if kind == "seq":
        return 1 + sum(costs[c] for c in children[i])
    if kind == "list":  # never called itself
        return sum(costs[c] for c in children[i])
    if kind != "block":
        return 1
    total = 1
    for step in programs[i]:
        if step[0] == "call":
            total += costs[children[i][step[1]]]
        elif step[0] == "call_n":
            total += step[2] * costs[children[i][step[1]]]
        elif step[0] == "mode":
            total += max(costs[children[i][step[1]]], costs[children[i][step[2]]])
    return total


def _picker(draw):
    # Integer draws are the cheapest choice hypothesis offers, and they shrink
    # towards the first option (the simplest: see the orders below).
    def pick(options):
        options = list(options)
        return options[draw(st.integers(0, len(options) - 1))] if len(options) > 1 else options[0]

    return pick


@st.composite
def model_specs(
    draw,
    min_modules: int = 1,
    max_modules: int = 8,
    tracers: tuple[str, ...] = ("default",),
    concrete: bool = False,
    nested_uses: bool = False,
    max_steps: int = 6,
    real_uses: bool = True,
) -> ModelSpec:
    """Traceable models: static control flow, repeated and shared module calls,
    direct parameter uses, unused parameters, parameter-free modules, nested
    containers; ``tracers`` picks tracer kinds (see ``TRACERS``), ``concrete``
    adds a root branch specialised by ``concrete_args``, ``nested_uses`` adds
    parameters passed by keyword or inside a list. ``real_uses`` adds what
    real forwards do: buffers (persistent or not, read alone or next to a
    parameter), parameters read through views and slices, tied parameters,
    batch norms and never-called ``ModuleList`` containers."""
    pick = _picker(draw)
    n = draw(st.integers(min_modules, max_modules))
    kind_options = ("block", "linear", "act", "seq", "block") + (("norm", "list") if real_uses else ())
    # Everything about one module is drawn in one run of choices, so the
    # shrinker can delete a module by deleting that run.
    kinds: list[str] = []
    kids: list[list[int]] = [[] for _ in range(n)]
    params: list[tuple] = []
    buffers: list[tuple] = []
    for i in range(n):
        kinds.append(pick(kind_options) if i else "block")
        if i:
            # nn.Sequential would call a ModuleList, which has no forward
            allowed = ("block", "list") if kinds[i] == "list" else ("block", "seq", "list")
            containers = [j for j in range(i) if kinds[j] in allowed]
            first = pick(containers)
            kids[first].append(i)
            others = [j for j in containers if j != first]
            if others and draw(st.booleans()):
                kids[pick(others)].append(i)  # shared: registered under a second parent
        is_block = kinds[i] == "block"
        params.append(tuple(pick(("vec", "mat")) for _ in range(draw(st.integers(0, 3)))) if is_block else ())
        buffers.append(
            tuple(pick(("pbuf", "nbuf")) for _ in range(draw(st.integers(0, 2)))) if is_block and real_uses else ()
        )
    ties = _draw_ties(draw, pick, kinds, params) if real_uses else ()
    concrete_mode = draw(st.booleans()) if concrete else None

    costs = [1] * n
    programs: list[tuple] = [()] * n
    for i in range(n - 1, -1, -1):
        if kinds[i] == "block":
            programs[i] = _draw_program(
                draw, pick, i, kinds, kids, params, costs, concrete_mode, nested_uses, max_steps, buffers
            )
        costs[i] = _call_cost(kinds, kids, programs, costs, i)

    tracer = pick(tracers)
    blocks = [i for i in range(1, n) if kinds[i] == "block"]
    leaf_blocks = frozenset()
    if tracer != "default" and blocks:
        leaf_blocks = frozenset(pick(blocks) for _ in range(draw(st.integers(0, 2))))
    return ModelSpec(
        kinds=tuple(kinds),
        children=tuple(tuple(k) for k in kids),
        params=tuple(params),
        programs=tuple(programs),
        tracer=tracer,
        leaf_blocks=leaf_blocks,
        concrete_mode=concrete_mode,
        buffers=tuple(buffers) if any(buffers) else (),
        ties=ties,
    )


def _draw_ties(draw, pick, kinds, params):
    """Some block parameters become another module's parameter of the same
    shape (never one that is itself tied away): two names, one Parameter."""
    sources = {"vec": [], "mat": []}
    for j, kind in enumerate(kinds):
        if kind == "block":
            for p, shape in enumerate(params[j]):
                sources[shape].append((j, f"p{p}"))
        elif kind == "linear":
            sources["mat"].append((j, "weight"))
            sources["vec"].append((j, "bias"))
        elif kind == "norm":
            sources["vec"].append((j, "weight"))
    ties, taken = [], set()
    for i, kind in enumerate(kinds):
        for p, shape in enumerate(params[i] if kind == "block" else ()):
            options = [s for s in sources[shape] if s[0] != i and s not in taken]
            if (i, f"p{p}") in taken or not options or draw(st.integers(0, 3)) != 3:
                continue
            source = pick(options)
            ties.append((i, p, *source))
            taken.update({(i, f"p{p}"), source})
    return tuple(ties)


def _draw_program(
    draw, pick, i, kinds, kids, params, costs, concrete_mode, nested_uses, max_steps, buffers
):
    vecs = [p for p, k in enumerate(params[i]) if k == "vec"]
    mats = [p for p, k in enumerate(params[i]) if k == "mat"]
    bufs = list(range(len(buffers[i])))
    slots = range(len(kids[i]))
    child_params, child_bufs = [], []
    for slot, child in enumerate(kids[i]):
        if kinds[child] == "linear":
            child_params.append((slot, "bias"))
        elif kinds[child] == "block":
            child_params += [(slot, f"p{p}") for p, k in enumerate(params[child]) if k == "vec"]
            child_bufs += [(slot, f"b{b}") for b in range(len(buffers[child]))]
        elif kinds[child] == "norm":
            child_params.append((slot, "weight"))
            child_bufs.append((slot, "running_mean"))
    ops = ["relu"]
    if slots:
        ops += ["call", "call_n"] + (["mode"] if i == 0 and concrete_mode is not None else [])
    if vecs:
        ops += ["mul", "addcmul"] + (["stack_use"] if nested_uses else [])
    if mats:
        ops += ["linear"] + (["kw_linear"] if nested_uses else [])
    if child_params:
        ops.append("child_param")
    if bufs:
        ops += ["buf"] + (["buf_param"] if vecs else [])
    if child_bufs:
        ops.append("child_buf")
    if vecs or mats:
        ops += ["slice", "view"] + (["t_linear"] if mats else [])
    steps, cost = [], 1
    # Optionally call every child once first, so shared children really are
    # called from each of their parents; then random steps.
    planned = [("call", slot) for slot in slots] if slots and draw(st.booleans()) else []
    planned += [None] * draw(st.integers(0, max_steps))
    for preset in planned:
        op = pick(ops) if preset is None else "call"
        if op in ("call", "call_n", "mode"):
            if op == "call":
                step = preset or ("call", pick(slots))
                extra = costs[kids[i][step[1]]]
            elif op == "call_n":
                step = ("call_n", pick(slots), draw(st.integers(2, 3)))
                extra = step[2] * costs[kids[i][step[1]]]
            else:
                step = ("mode", pick(slots), pick(slots))
                extra = max(costs[kids[i][step[1]]], costs[kids[i][step[2]]])
            if cost + extra > CALL_BUDGET:
                continue  # dropped: keeps shared, repeated calls from exploding
            cost += extra
        elif op in ("mul", "stack_use"):
            step = (op, pick(vecs))
        elif op == "addcmul":
            step = (op, pick(vecs), pick(vecs))
        elif op in ("linear", "kw_linear"):
            step = (op, pick(mats))
        elif op == "child_param":
            step = ("child_param", *pick(child_params))
        elif op == "buf":
            step = ("buf", pick(bufs))
        elif op == "buf_param":
            step = ("buf_param", pick(bufs), pick(vecs))
        elif op == "child_buf":
            step = ("child_buf", *pick(child_bufs))
        elif op in ("slice", "view"):
            step = (op, pick(vecs + mats)) + ((draw(st.integers(1, DIM)),) if op == "slice" else ())
        elif op == "t_linear":
            step = ("t_linear", pick(mats))
        else:
            step = ("relu",)
        steps.append(step)
    return tuple(steps)


@st.composite
def failing_model_specs(draw, **kwargs):
    """Models whose trace raises half-way (:func:`with_failure` on a drawn
    block): the failure is part of the example, so it is seen, counted as a
    generator feature and shrunk with the rest. ``without_failure`` gives
    the same model tracing normally."""
    spec = draw(model_specs(**kwargs))
    blocks = [i for i, kind in enumerate(spec.kinds) if kind == "block"]
    return with_failure(spec, draw(st.sampled_from(blocks)))


def without_failure(spec: ModelSpec) -> ModelSpec:
    programs = tuple(tuple(step for step in spec.program_of(i) if step != ("fail",)) for i in range(spec.size))
    return replace(spec, programs=programs)


def exotic_tracer_specs(**kwargs):
    """Specs traced by tracer subclasses and/or with ``concrete_args`` (EXO-7)."""
    kwargs.setdefault("tracers", ("leaf_rules", "into_nn", "wrapping", "buffer_proxies"))
    kwargs.setdefault("concrete", True)
    return model_specs(**kwargs)
