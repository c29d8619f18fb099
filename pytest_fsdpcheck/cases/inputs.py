"""What the checks of :mod:`.checks` take from a user's model case: its
plan as recorded (once per case object, :func:`recorded`) and copies of
its model, the one graph Dynamo captures and the bucket caps
(DDPOptimizer), the model as an FSDP1 tree and the modules its plan
ignores, whether plain fx traces it (exec order), and for FS2-9's ranks a
picklable builder of the case and the plan's groups as their control
reduces them (:func:`control_groups`). :mod:`.exposure` replays known
bugs on the same inputs.
"""

from __future__ import annotations

import functools
import re

from ..checks import Violation
from ..core.not_provided import NotProvided
from .model import ModelCase, build_case, load_factory, model_copy, unit_names
from .replay import calls_on, replicate_on


def recorded(case: ModelCase):
    """The case's plan recorded (once per case object)."""
    from ..core.run_state import current
    from .recording import record_plan

    # the run's: a run's cases (and their models) are let go with it
    plans = current().recorded_plans
    key = id(case)
    hit = plans.get(key)
    if hit is None or hit[0] is not case:
        hit = plans[key] = (case, record_plan(case))
    return hit[1]


def _copy(record):
    return model_copy(record.pristine, record.case)


# --- DDPOptimizer -------------------------------------------------------------------


def captured(case: ModelCase):
    """``(gm, example_inputs)`` of the one graph Dynamo captures for the
    model (a copy of it, DDP-ignored marks kept); a skip with Dynamo's
    reason where it cannot."""
    import torch
    import torch._dynamo

    from ..core.torch_support import compile_unsupported

    reason = compile_unsupported()
    if reason:
        raise NotProvided(reason)
    model = model_copy(case.model, case)
    graphs = []

    def capture(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    try:
        case.call(torch.compile(model, backend=capture))
    except Exception as exc:  # noqa: BLE001 - the reason is what Dynamo says
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise NotProvided(f"torch {torch.__version__}'s Dynamo cannot capture {case.name} "
                          f"({type(exc).__name__}: {first})", case_input=True) from None
    if len(graphs) != 1:
        raise NotProvided(f"Dynamo captured {case.name} as {len(graphs)} graphs (graph breaks); "
                          "the bucket checks take one", case_input=True)
    return graphs[0]


def bucket_caps(case: ModelCase, facts) -> tuple[int, int]:
    mib = 1024 * 1024
    if case.bucket_cap_mb is not None:
        cap = int(case.bucket_cap_mb * mib)
        first = int(case.first_bucket_cap_mb * mib) if case.first_bucket_cap_mb is not None else min(cap, mib)
        return cap, first
    cap = max(facts.total // 4, 1)
    return cap, cap


def _bucket_input(case, impl):
    """The captured graph, its facts, the caps and its form, for the bucket
    checks of ``impl``; a skip where it has none."""
    from ..checks import splitting as chk
    from ..contract import accepted_forms

    if getattr(impl, "splitting", None) is None:
        raise NotProvided("this implementation has no splitting area")
    gm, example_inputs = captured(case)
    facts = chk.graph_facts(gm, example_inputs)
    cap, first = bucket_caps(case, facts)
    form = "module" if any(n.op == "call_module" for n in gm.graph.nodes) else "dynamo"
    if form not in accepted_forms(impl.splitting):
        raise NotProvided(f"Dynamo captured {case.name} as a {form}-form graph, which this implementation's splitting does not accept")
    return gm, example_inputs, facts, cap, first, form


# --- FSDP1: traversal and annotation ------------------------------------------------


def _fsdp1_tree(case: ModelCase, traversal=None, ignored: tuple = ()):
    """The case's model (a copy) as a generated tree: its FSDP1 units as
    states (the root's is the root state), ``replicate`` marks, the modules
    named in ``ignored`` as its ignored set."""

    from ..checks.plan import topological_modules
    from ..generators.trees import BuiltTree, TreeSpec, attach_states

    model = model_copy(case.model, case)
    modules = topological_modules(model)
    index = {id(m): i for i, m in enumerate(modules)}
    states: list = [None] * len(modules)
    units = unit_names(case)
    for sid, unit in enumerate(units):
        for name in unit:
            states[index[id(model.get_submodule(name))]] = sid
    children = tuple(tuple(index[id(c)] for c in m._modules.values() if c is not None) for m in modules)
    spec = TreeSpec(children=children, states=tuple(states), root_states=frozenset({0}),
                    handled_states=frozenset(range(len(units))),
                    replicate=frozenset(index[id(model.get_submodule(n))] for n in case.replicate),
                    ignored=frozenset(index[id(model.get_submodule(n))] for n in ignored))
    tree = BuiltTree(spec, model, modules)
    if traversal is not None:
        attach_states(tree, traversal)
    return tree


def _tree_named(violations, tree) -> list[Violation]:
    names = {}
    for name, m in tree.root.named_modules():
        names.setdefault(id(m), name or "<root>")

    def sub(match):
        i = int(match.group(1))
        return names.get(id(tree.modules[i]), match.group(0)) if i < len(tree.modules) else match.group(0)

    return [Violation(v.invariant, re.sub(r"\bm(\d+)\b", sub, v.message), v.detail) for v in violations]


def plan_ignored_modules(case: ModelCase) -> tuple[str, ...]:
    """Qualified names of the modules the plan's ``fully_shard`` calls
    ignore: each has parameters of its own, all of them among some call's
    ``ignored_params``. Empty without a plan, on a torch without
    ``fully_shard``, or where no call ignores parameters."""
    if case.plan is None:
        return ()
    from ..impls.torch_fsdp2 import fsdp2_available

    if not fsdp2_available():
        return ()
    record = recorded(case)
    model = record.pristine
    params = dict(model.named_parameters(remove_duplicate=False))
    ignored = {id(params[n]) for call in record.calls for n in call.ignored or () if n in params}
    found = []
    for name, module in model.named_modules():
        own = [p for p in module._parameters.values() if p is not None]
        if own and all(id(p) in ignored for p in own):
            found.append(name)
    return tuple(found)


def _not_ignored_below(case, ignored: tuple) -> list[str]:
    """The modules under one of ``ignored`` that are not ignored themselves:
    what ANN-3 is about."""
    below = []
    for name in ignored:
        module = case.model.get_submodule(name)
        for sub_name, _ in module.named_modules(prefix=name):
            if sub_name != name and sub_name not in ignored and sub_name not in below:
                below.append(sub_name)
    return below


# --- exec order ---------------------------------------------------------------------


class _Labelled:
    def __init__(self, root):
        self.root = root
        self._names = {}
        for name, m in root.named_modules():
            self._names.setdefault(id(m), name or "<root>")

    def label(self, obj):
        return self._names.get(id(obj), repr(obj))


def untraceable(case: ModelCase) -> str | None:
    """Why a plain ``torch.fx.Tracer`` cannot trace the model, or None."""

    import torch.fx

    try:
        torch.fx.Tracer().trace(model_copy(case.model, case))
    except Exception as exc:  # noqa: BLE001 - the reason is what fx says
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        return f"{case.name} is not torch.fx-traceable ({type(exc).__name__}: {first})"
    return None


# --- FS2-9: the ranks' case and their control ---------------------------------------


def case_builder(case: ModelCase):
    """A picklable zero-argument callable giving ``case`` in another process:
    rebuilt there from its factory where it has one, else the case itself."""
    if case.factory_ref is not None:
        return functools.partial(_case_from_ref, case.factory_ref, tuple(case.factory_kwargs))
    return functools.partial(_same, case)


def _case_from_ref(ref, kwargs):
    return build_case(load_factory(ref), **dict(kwargs))


def _same(case):
    return case


def control_groups(case) -> tuple:
    """The plan's groups, as its recorded calls asked for them
    (:class:`~pytest_fsdpcheck.runs.plan_run.PlanGroup`): FS2-9's control
    computes and reduces each at its call's ``mp_policy``. Each group's
    parameters are the spec's for the call (:func:`~pytest_fsdpcheck.checks.plan.spec_groups`),
    not what torch sharded: a parameter torch left out of every group must
    show in the gradients, not in the control."""
    from ..checks.plan import spec_groups
    from ..runs.plan_run import PlanGroup
    from .recording import names_of

    record = recorded(case)
    pristine = record.pristine
    first = names_of(pristine)

    def canonical(name):
        try:
            return first.get(id(pristine.get_parameter(name)), name)
        except AttributeError:
            return name

    spec = spec_groups(pristine, calls_on(record, pristine), replicate_on(record, pristine))
    groups = []
    for call, (_, params) in zip(record.calls, spec, strict=True):
        if call.error is not None or not params:
            continue
        policy = call.kwargs.get("mp_policy")
        groups.append(PlanGroup(
            params=tuple(dict.fromkeys(first[id(p)] for p in params)),
            roots=call.roots,
            param_dtype=getattr(policy, "param_dtype", None),
            reduce_dtype=getattr(policy, "reduce_dtype", None),
            output_dtype=getattr(policy, "output_dtype", None),
            cast_forward_inputs=getattr(policy, "cast_forward_inputs", True),
        ))
    replicated = set(case.replicate).union(*(call.replicate for call in record.calls))
    if replicated:
        # another composable API (DDP's replicate) averages these, uncast
        below = [n for n, _ in pristine.named_parameters()
                 if any(n.startswith(f"{m}.") or not m for m in replicated)]
        groups.append(PlanGroup(tuple(canonical(n) for n in below)))
    return tuple(groups)
