"""The checks run on a user's model case, each ``check(case, impl)``: it
returns nothing, raises :class:`~pytest_fsdpcheck.checks.ConformanceFailure`
(with a reproducer that imports the user's factory), or raises
:class:`~pytest_fsdpcheck.core.not_provided.NotProvided` (a skip, ``n/p``)
where the check has no input on this torch or this case.

``case`` may also be a factory (or its ``pkg.module:factory`` name): one
with declared strategies is drawn by Hypothesis and a failure is shrunk to
its smallest configuration.

What the checks take from a case (its recorded plan, Dynamo's graph, FSDP1
trees) is in :mod:`.inputs`; whether the case itself is the user's mistake,
probed once before any check runs, in :mod:`.probe`.
"""

from __future__ import annotations

import functools
import re

from ..checks import Violation, difference, error_of, one_line, short
from ..checks.annotation import MANAGED, ORIG_PARAMS, read_flag
from ..core.not_provided import NotProvided
from .inputs import (
    _bucket_input,
    _copy,
    _fsdp1_tree,
    _Labelled,
    _not_ignored_below,
    _tree_named,
    case_builder,
    control_groups,
    plan_ignored_modules,  # also read as checks.plan_ignored_modules (tests/test_model_bucket_checks.py)
    recorded,
    untraceable,
)
from .model import (
    CaseError,
    ModelCase,
    build_case,
    examples_of,
    load_factory,
    model_copy,  # also this module's name for it (users' tests)
    strategies_of,
)
from .probe import _first_line, _resolve, case_label, case_problem
from .replay import PlanReplay


def _judge(impl, case, check_name, body):
    """Run a replayable ``body(impl)`` through the known-bug judge."""
    from ..known.judge import conform

    conform(impl, body, reproducer(case, check_name, impl))


def reproducer(case: ModelCase, check_name: str, impl) -> str:
    from ..checks.repro import guarded_script, spec_of

    lines = case.reproducer_lines()
    imports = [line for line in lines if line.startswith(("from ", "import "))]
    # under the guard: FS2-9's ranks are spawned and re-import the script
    return guarded_script([*imports, "from pytest_fsdpcheck.cases import checks"],
                          [*(line for line in lines if line not in imports),
                           f"checks.{check_name}(case, {spec_of(impl)!r})"])


def _named(violations, oracle) -> list[Violation]:
    """The FS2 checkers label modules ``m<i>`` by the oracle's index: name them."""
    def sub(match):
        i = int(match.group(1))
        return oracle.label(oracle.modules[i]) if i < len(oracle.modules) else match.group(0)

    return [Violation(v.invariant, re.sub(r"\bm(\d+)\b", sub, v.message), v.detail) for v in violations]


def check_case(case, impl=None):
    """The case itself: raises :class:`CaseError` (one line naming the
    factory and the cause) where it is the user's mistake
    (:func:`~pytest_fsdpcheck.cases.probe.case_problem`); every other check
    on such a case is n/p, so the mistake is reported once."""
    _resolve(case, impl)


def _require_plan(case, impl):
    if case.plan is None:
        raise NotProvided(f"case {case.name!r} gives no FSDP2 plan", case_input=True)
    if getattr(impl, "fsdp2", None) is None:
        raise NotProvided("this implementation has no fsdp2 area")
    from ..impls.torch_fsdp2 import fsdp2_available

    if not fsdp2_available():
        raise NotProvided("this torch has no fully_shard")


# --- FSDP2 --------------------------------------------------------------------------


def check_plan_rules(case, impl=None):
    """PLN-1..5: the plan's own mistakes
    (:func:`~pytest_fsdpcheck.cases.probe.plan_rule_violations`). Each is
    the user's: a one-line :class:`CaseError` naming the factory and the
    rule, as :func:`check_case` raises it, never an implementation's
    failure (no implementation is judged here)."""
    case, impl = _resolve(case, impl)
    _require_plan(case, impl)


def check_fsdp2_walk(case, impl=None):
    """FS2-1..5 for each recorded call: the implementation's walk and states
    on the model as the earlier calls leave it (their roots holding a group,
    ``replicate`` owners marked), against the oracle."""
    from ..checks.fsdp2 import check_managed, check_states, expected_managed

    case, impl = _resolve(case, impl)
    _require_plan(case, impl)
    record = recorded(case)
    _require_calls_taken(record, impl)

    def body(impl):
        area = impl.fsdp2
        violations = []
        for step in PlanReplay(record, _copy(record), area):
            oracle, ignored = step.oracle, step.ignored
            found = check_managed(oracle, area.managed_modules(step.roots, ignored))
            managed = expected_managed(oracle)
            modules = [oracle.modules[i] for i in managed]
            found += check_states(oracle, managed, lambda modules=modules, ignored=ignored: area.managed_states(modules, ignored))
            violations += [Violation(v.invariant, f"{step.call.label()}: {v.message}", v.detail) for v in _named(found, oracle)]
        return violations

    _judge(impl, case, "check_fsdp2_walk", body)


def _require_calls_taken(record, impl) -> None:
    """n/p where the plan's calls use what this implementation's (this
    torch's) fully_shard does not take: several modules in one call (2.5+),
    ``ignored_params`` (2.7+). The plan is the framework's for a newer
    release; its calls are no FAIL of this one."""
    if any(len(c.roots) > 1 for c in record.calls) and not getattr(impl.fsdp2, "several_roots", True):
        raise NotProvided("the plan shards several modules in one call; this implementation's fully_shard takes one")
    if any(c.ignored is not None for c in record.calls) and not getattr(impl.fsdp2, "takes_ignored_params", True):
        raise NotProvided("the plan passes ignored_params; this implementation's fully_shard takes none")


def check_fsdp2_recorded(case, impl=None):
    """FS2-1, FS2-4 on what torch's walk and state collection returned
    inside each of the plan's real ``fully_shard`` calls, against the oracle
    on the model as the earlier calls left it (up to the first call that
    raised: what torch leaves after an error is not specified)."""
    from ..checks.fsdp2 import expected_managed, expected_states
    from ..impls.torch_fsdp2 import TorchFsdp2

    case, impl = _resolve(case, impl)
    _require_plan(case, impl)
    # under the plugin the implementation comes guarded (guard.Guarded):
    # whether it is torch's own is a question about what it guards
    if not isinstance(getattr(impl, "_fsdpcheck_inner", impl).fsdp2, TorchFsdp2):
        raise NotProvided("the recorded fully_shard calls are the installed torch's own")
    record = recorded(case)
    _require_calls_taken(record, impl)
    violations: list[Violation] = []
    managed_by: set[int] = set()
    sharded: set[int] = set()
    for step in PlanReplay(record, record.pristine):
        oracle, call = step.oracle, step.call
        managed = expected_managed(oracle)
        params, buffers, _ = expected_states(oracle, managed)
        if call.error is not None:
            # The plan's arguments were checked against fully_shard's signature
            # before the call (a call it does not take is the case's error):
            # raising on one that shares nothing with an earlier group is torch's.
            if not managed_by.intersection(managed) and not sharded.intersection(map(id, params)):
                violations.append(Violation(
                    "FS2-7", f"{call.label()}: torch's fully_shard raised on a call whose arguments it takes and which "
                             "shares nothing with an earlier group", detail=_first_line(call.error),
                    error=error_of(call.error)))
            break  # what torch leaves after an error is not specified
        managed_by.update(managed)
        sharded.update(map(id, params))
        want = [oracle.label(oracle.modules[i]) for i in managed]
        got = None if call.walk is None else [n or "<root>" for n in call.walk]
        if got is not None and got != want:
            violations.append(Violation("FS2-1", f"{call.label()}: torch's walk inside the call differs from the managed "
                                                 f"modules expected: {difference(want, got)}", evidence=(tuple(got), tuple(want))))
        for what, got_s, want_s in (("parameters", call.params, params), ("buffers", call.buffers, buffers)):
            if got_s is not None and got_s != oracle.labels(want_s):
                violations.append(Violation("FS2-4", f"{call.label()}: {what} collected inside the call differ from those "
                                                     f"expected: {difference(oracle.labels(want_s), got_s)}",
                                            evidence=(tuple(got_s), tuple(oracle.labels(want_s)))))
    from ..known.judge import conform

    conform(impl, violations, reproducer(case, "check_fsdp2_recorded", impl))


def check_fully_shard_calls(case, impl=None):
    """FS2-7, FS2-8: the plan's calls (roots and ignored parameters, in its
    order) replayed through the implementation's ``annotate`` (torch: the
    real ``fully_shard``) on a copy of the model: a call sharing a module or
    parameter with an earlier group must be rejected with a clear error
    naming it; otherwise exactly the managed modules carry the Dynamo flags."""
    from ..checks.fsdp2 import expected_managed, expected_states
    from .recording import mesh_of_this_world

    case, impl = _resolve(case, impl)
    _require_plan(case, impl)
    record = recorded(case)
    _require_calls_taken(record, impl)

    def body(impl):
        area = impl.fsdp2
        model = _copy(record)
        plan = PlanReplay(record, model, area)
        oracle = plan.oracle
        managed_by: set[int] = set()
        sharded: set[int] = set()
        flagged_expected: set[str] = set()
        with mesh_of_this_world() as mesh:
            for step in plan:
                roots, ignored, call = step.roots, step.ignored, step.call
                managed = expected_managed(oracle)
                params, _, _ = expected_states(oracle, managed)
                shared = [oracle.modules[i] for i in managed if i in managed_by]
                shared += [p for p in params if id(p) in sharded]
                conflicts = [oracle.label(x) for x in shared]
                where = call.label()
                try:
                    area.annotate(roots, mesh, ignored)
                except Exception as exc:  # noqa: BLE001 - judged below
                    err = f"{type(exc).__name__}: {one_line(exc)}"
                    if not conflicts:
                        return [Violation("FS2-7", f"{where} raised, but shares nothing with an earlier group", detail=err, error=error_of(exc))]
                    if not isinstance(exc, (ValueError, RuntimeError)) or isinstance(exc, NotImplementedError):
                        return [Violation("FS2-8", f"{where} shares {conflicts[0]} with an earlier group and failed with "
                                                   "an internal error, not a clear one naming it", detail=err, error=error_of(exc))]
                    if not any(_names_it(str(exc), _aliases(model, roots, x)) for x in shared):
                        return [Violation("FS2-8", f"{where}: the error for {conflicts[0]}, shared with an earlier "
                                                   "group, does not name it", detail=err, error=error_of(exc))]
                    return []
                if conflicts:
                    return [Violation("FS2-8", f"{where} accepted {conflicts[0]}, which an earlier group already "
                                               "manages (managed twice, no error)")]
                managed_by.update(managed)
                sharded.update(id(p) for p in params)
                flagged_expected.update(oracle.label(oracle.modules[i]) for i in managed)
        flagged = {oracle.label(m) for m in oracle.modules
                   if read_flag(m, MANAGED) is True and read_flag(m, ORIG_PARAMS) is True}
        if flagged != flagged_expected:
            return [Violation("FS2-7", "after the plan, the Dynamo flags are not on exactly the managed modules: "
                                       f"{difference(sorted(flagged_expected), sorted(flagged))}",
                              evidence=(tuple(sorted(flagged)), tuple(sorted(flagged_expected))))]
        return []

    _judge(impl, case, "check_fully_shard_calls", body)


def _aliases(model, roots, obj) -> set[str]:
    """Every name ``obj`` (a module or parameter) goes by: its qualified names
    in the model (a tied parameter has several), and its paths below the
    call's roots (``roots[0].weight`` and ``weight``)."""
    import torch

    def names_below(top):
        found = set()
        members = (top.named_parameters(remove_duplicate=False) if isinstance(obj, torch.nn.Parameter)
                   else top.named_modules(remove_duplicate=False))
        for name, member in members:
            if member is obj and name:
                found.add(name)
        return found

    names = names_below(model)
    for k, root in enumerate(roots):
        for name in names_below(root):
            # a bare one-part name ("weight") would be found in any message
            names |= {f"roots[{k}].{name}", *([name] if "." in name else [])}
    return names


def _names_it(message: str, names) -> bool:
    # whole names only: a two-letter module name must not match inside an
    # address such as "object at 0x7f1c4e2a9d10"
    return any(re.search(rf"(?<![\w.\]]){re.escape(n)}(?!\w)", message) for n in names)


# --- DDPOptimizer -------------------------------------------------------------------


def check_buckets(case, impl=None):
    """SPL-2..8 on the graph Dynamo captures for the model."""
    from ..checks import splitting as chk
    from ..known.judge import conform

    case, impl = _resolve(case, impl)
    gm, example_inputs, facts, cap, first, form = _bucket_input(case, impl)

    def body(impl):
        return chk.check_captured_split(impl.splitting, gm, example_inputs, facts, cap, first)

    conform(impl, body, reproducer(case, "check_buckets", impl), form=form)


def check_bucket_assignment(case, impl=None):
    """SPL-15 on the graph Dynamo captures for the model: the plan groups
    the parameter-holding nodes as DDP's own assignment does; n/p, with the
    reason, where the graph and the spec's plan leave nothing to compare."""
    from ..checks import splitting as chk
    from ..known.judge import conform

    case, impl = _resolve(case, impl)
    gm, example_inputs, facts, cap, first, form = _bucket_input(case, impl)
    import torch.distributed as dist

    if not dist.is_available():
        raise NotProvided("torch.distributed is not available, and DDP's bucket assignment is part of it")
    reason = chk.ddp_assignment_unjudgeable(gm, example_inputs, facts, cap, first)
    if reason is not None:
        raise NotProvided(f"{case.name}: {reason}", case_input=True)

    def body(impl):
        return chk.check_captured_assignment(impl.splitting, gm, example_inputs, facts, cap, first)

    conform(impl, body, reproducer(case, "check_bucket_assignment", impl), form=form)


# --- FSDP1: traversal and annotation ------------------------------------------------


def check_traversal(case, impl=None):
    """TRV-1..7, 9 with the case's FSDP1 units as states."""
    from ..checks.traversal import (
        check_handles,
        check_root_states,
        check_states_with_modules,
        check_unmutated,
        snapshot,
    )

    case, impl = _resolve(case, impl)
    if getattr(impl, "traversal", None) is None:
        raise NotProvided("this implementation has no traversal area")

    def body(impl):
        tree = _fsdp1_tree(case, impl.traversal)
        before = snapshot(tree)
        states, modules = impl.traversal.states_with_modules(tree.root)
        out = check_states_with_modules(tree, states, modules)
        out += check_handles(tree, impl.traversal.handles(tree.root))
        out += check_root_states(tree, impl.traversal.root_states(tree.root))
        out += check_unmutated(tree, before)
        return _tree_named(out, tree)

    _judge(impl, case, "check_traversal", body)


def _annotation_body(case, ignored: tuple):
    """ANN-1..6 after annotating a copy of the model with the modules named
    in ``ignored`` as ignored, with both flag values."""
    from ..checks.annotation import check_annotated, check_idempotent, snapshot

    def body(impl):
        out = []
        for flag in (True, False):
            tree = _fsdp1_tree(case, ignored=ignored)
            modules = {tree.modules[i] for i in tree.spec.ignored}
            before = snapshot(tree)
            impl.annotation.annotate(tree.root, set(modules), flag)
            out += check_annotated(tree, before, flag)
            once = snapshot(tree)
            impl.annotation.annotate(tree.root, set(modules), flag)
            twice = snapshot(tree)
            impl.annotation.annotate(tree.root, set(modules), not flag)
            out += check_idempotent(tree, once, twice, snapshot(tree), flag)
            out = _tree_named(out, tree)
        return out

    return body


def _require_annotation(impl):
    if getattr(impl, "annotation", None) is None:
        raise NotProvided("this implementation has no annotation area")


def check_annotation(case, impl=None):
    """ANN-1, 4, 5, 6 on the case's model, with the modules its plan ignores
    as the ignored set (so a violation of ANN-2 or ANN-3 fails too), both
    flag values."""
    case, impl = _resolve(case, impl)
    _require_annotation(impl)
    _judge(impl, case, "check_annotation", _annotation_body(case, plan_ignored_modules(case)))


def check_annotation_ignored(case, impl=None):
    """ANN-3 where the plan ignores a module with a descendant that is not
    ignored itself (that descendant must still be annotated); n/p, with the
    reason, elsewhere: with nothing below an ignored module, no annotation
    can break it."""
    case, impl = _resolve(case, impl)
    _require_annotation(impl)
    if case.plan is None:
        raise NotProvided(f"case {case.name!r} gives no FSDP2 plan, so no module is ignored", case_input=True)
    ignored = plan_ignored_modules(case)
    if not ignored:
        raise NotProvided(f"case {case.name!r}: its plan ignores no module (no module has all of its own "
                          "parameters in a fully_shard call's ignored_params)", case_input=True)
    if not _not_ignored_below(case, ignored):
        raise NotProvided(f"case {case.name!r}: every module below the ones its plan ignores "
                          f"({short(ignored, 4)}) is ignored too", case_input=True)
    _judge(impl, case, "check_annotation_ignored", _annotation_body(case, ignored))


# --- exec order ---------------------------------------------------------------------


def check_exec_order(case, impl=None):
    """EXO-2..6 where plain fx traces the model (else not provided, with fx's reason)."""

    import torch.fx

    from ..checks.exec_order import (
        check_module_order,
        check_param_order,
        check_same_graph,
        check_usage_infos,
        check_visited,
        observe_eager,
    )

    case, impl = _resolve(case, impl)
    if getattr(impl, "exec_order", None) is None:
        raise NotProvided("this implementation has no exec_order area")
    reason = untraceable(case)
    if reason is not None:
        raise NotProvided(reason, case_input=True)

    def body(impl):
        model = model_copy(case.model, case)
        built = _Labelled(model)
        tracer = torch.fx.Tracer()
        with impl.exec_order.patch_tracer(tracer, model) as info:
            graph = tracer.trace(model)
        plain = torch.fx.Tracer().trace(model)
        observed = observe_eager(model, case.example_inputs, torch.fx.Tracer(), case.example_kwargs)
        return (check_module_order(built, info, observed) + check_param_order(built, info, observed)
                + check_usage_infos(built, info, observed) + check_visited(built, info) + check_same_graph(plain, graph))

    _judge(impl, case, "check_exec_order", body)


def check_plan_end_to_end(case, impl=None, world_size: int = 2, timeout_s: float = 60.0):
    """FS2-9: the plan's real ``fully_shard`` calls at ``world_size`` (CPU
    ranks, gloo), one step, each rank on its own batch (the case's inputs on
    rank 0, a variation of them on the others), eagerly and compiled: every
    parameter's full gradient equals the unsharded model's over all ranks'
    batches at the plan's own precision
    (:func:`~pytest_fsdpcheck.cases.inputs.control_groups`). The ranks get
    :func:`~pytest_fsdpcheck.runs.plan_world.rank_limit` of ``timeout_s``
    (``--fsdpcheck-timeout``) and of one unsharded step's cost, measured
    here; a world killed there outside a hung plan step raises
    :class:`~pytest_fsdpcheck.checks.EnvironmentFault` (ERROR). A step that
    fails the same way in the unsharded control at the plan's precision
    (:func:`~pytest_fsdpcheck.checks.plan_distributed.users_mistake`) raises
    :class:`CaseError`, one line naming the factory: the user's mistake."""
    from ..checks.plan_distributed import check_plan_end_to_end as judge
    from ..checks.plan_distributed import uncompilable_model
    from ..core.torch_support import compile_unsupported
    from ..impls.torch_fsdp2 import TorchFsdp2
    from ..runs.plan_world import run_plan_ranks

    case, impl = _resolve(case, impl)
    _require_plan(case, impl)
    # the plan calls the installed torch's fully_shard whatever the implementation under test
    if not isinstance(getattr(impl, "_fsdpcheck_inner", impl).fsdp2, TorchFsdp2):
        raise NotProvided("the plan's fully_shard is torch's own")
    reason = compile_unsupported()
    if reason is not None:
        raise NotProvided(reason)
    import torch

    if not torch.distributed.is_available():
        raise NotProvided("this torch build has no torch.distributed")
    if world_size < 2:
        raise NotProvided(f"FS2-9 needs world size >= 2, the runner gives {world_size}")
    from ..core.provided import expected_provided, first_release

    if not expected_provided("fsdp2.cpu_runtime", torch.__version__):
        raise NotProvided("the plan's ranks run on CPU (gloo), and fully_shard's runtime runs on CPU "
              f"from torch {first_release('fsdp2.cpu_runtime')}")
    from ..checks import EnvironmentFault
    from ..checks.plan_distributed import world_too_slow
    from ..runs.plan_world import rank_limit

    limit = rank_limit(timeout_s, _unsharded_step_seconds(case))
    records = run_plan_ranks(case_builder(case), world_size, timeout=limit, groups=control_groups(case),
                             call_limit=timeout_s or None)
    from ..checks.plan_distributed import reach_mistake

    violations = judge(records)
    uneven = reach_mistake(records, violations)
    if uneven is not None:
        # a rank's batch skips what the plan makes every rank's collective:
        # the step cannot run as FSDP2 documents it, whoever runs it
        raise CaseError(f"{case_label(case)}: FS2-9: {uneven}")
    slow = world_too_slow(records)
    if slow is not None:
        raise EnvironmentFault(f"environment (gloo on cpu, world size {world_size}): {slow}; "
                               "not a verdict on the implementation")
    from ..checks.plan_distributed import users_mistake

    mistake = users_mistake(records)
    if mistake is not None:
        # the unsharded control runs nothing of fully_shard: failing the same
        # way, the step is the plan's or the model's, never torch's cell
        raise CaseError(f"{case_label(case)}: FS2-9: {mistake}")
    uncompilable = uncompilable_model(records)
    if not violations and uncompilable is not None:
        raise NotProvided(uncompilable, case_input=True)
    from ..known.judge import conform

    conform(impl, violations, reproducer(case, "check_plan_end_to_end", impl))


#: the simulated world a plan is judged at when --fsdpcheck-world-size is not given
SIMULATED_WORLD_SIZE = 8


def check_plan_simulated(case, impl=None, world_size: int | None = None):
    """FS2-10: the plan's recorded calls replayed through the
    implementation's ``annotate`` (torch: the real ``fully_shard``) at
    ``world_size`` simulated ranks (``--fsdpcheck-world-size``; default 8),
    or on the case's own ``mesh_shape`` where it states one (HSDP: 2-D),
    one rank's view at a time on a fake process group (sampled ranks above
    8): each rank's groups, dim-0 rows and padding as the spec gives them,
    the Dynamo flags, every rank agreeing. Construction and assignment only:
    collectives and numerics are FS2-9's."""
    from ..checks.fsdp2 import expected_managed, expected_states
    from ..checks.fsdp2_world import Prepared, check_prepared_world
    from ..core.provided import expected_provided, first_release, installed_torch

    case, impl = _resolve(case, impl)
    _require_plan(case, impl)
    if not expected_provided("fsdp2.simulated_world", installed_torch()):
        raise NotProvided("simulated worlds (torch's fake process group) are recorded "
                          f"from torch {first_release('fsdp2.simulated_world')} (provided.py)",
                          release_lacks="fsdp2.simulated_world")
    area = impl.fsdp2
    if not callable(getattr(area, "sharded_groups", None)):
        raise NotProvided("this implementation's fsdp2 area has no sharded_groups (FS2-10)")
    if not getattr(area, "simulated_world", True):
        raise NotProvided("simulated worlds (a fake process group) are recorded from torch 2.13 (provided.py)")
    record = recorded(case)
    size = SIMULATED_WORLD_SIZE if world_size is None else world_size

    def make():
        # the groups are not marked: the simulated world's fully_shard gives them their states
        plan = PlanReplay(record, _copy(record), area, mark_groups=False)
        oracle = plan.oracle
        managed_all, groups, calls = set(), {}, []
        for step in plan:
            calls.append((step.roots, step.ignored))
            managed = expected_managed(oracle)
            params, _, _ = expected_states(oracle, managed)
            managed_all.update(oracle.label(oracle.modules[i]) for i in managed)
            key = tuple(sorted(oracle.label(r) for r in step.effective))
            groups.setdefault(key, []).append(tuple(sorted(oracle.labels(params))))
        labels = {id(m): oracle.label(m) for m in oracle.modules}
        for m in oracle.modules:
            for p in m._parameters.values():
                if p is not None:
                    labels.setdefault(id(p), oracle.label(p))
        return Prepared(list(oracle.modules), list(calls), lambda obj: labels.get(id(obj), f"<{type(obj).__name__}>"),
                        tuple(sorted(managed_all)), {k: sorted(v) for k, v in groups.items()})

    def body(impl):
        # the plan's own mesh where it states one, else a 1-D world of the size asked
        mesh = tuple(case.mesh_shape) if getattr(case, "mesh_shape", None) else (size,)
        return check_prepared_world(make, impl.fsdp2, mesh)

    _judge(impl, case, "check_plan_simulated", body)


def _unsharded_step_seconds(case) -> float:
    """One eager forward and backward of a copy of the case's model on its
    inputs, timed (the best of two: the first pays for lazy setup); 0 where
    it cannot run (the ranks report why)."""
    import time

    import torch

    from ..runs.plan_run import step_loss

    best = float("inf")
    # the session's generator left as it was: a dropout in the step draws from a fork
    with torch.random.fork_rng(devices=[]):
        try:
            for _ in range(2):
                model = model_copy(case.model, case)
                started = time.monotonic()
                kwargs = dict(getattr(case, "example_kwargs", None) or {})
                step_loss(model(*case.example_inputs, **kwargs), (case.example_inputs, kwargs),
                          getattr(case, "loss", None)).backward()
                best = min(best, time.monotonic() - started)
        except Exception:  # noqa: BLE001 - the ranks run the same step and report its error
            return 0.0
    return best


#: every check, by name, with the invariants it checks
CHECKS = {
    "check_case": (check_case, ()),
    "check_fsdp2_walk": (check_fsdp2_walk, ("FS2-1", "FS2-2", "FS2-3", "FS2-4", "FS2-5")),
    "check_fsdp2_recorded": (check_fsdp2_recorded, ("FS2-1", "FS2-4", "FS2-7")),
    "check_fully_shard_calls": (check_fully_shard_calls, ("FS2-7", "FS2-8")),
    "check_buckets": (check_buckets, ("SPL-2", "SPL-3", "SPL-4", "SPL-5", "SPL-6", "SPL-7", "SPL-8")),
    "check_bucket_assignment": (check_bucket_assignment, ("SPL-15",)),
    "check_traversal": (check_traversal, ("TRV-1", "TRV-2", "TRV-3", "TRV-4", "TRV-6", "TRV-7", "TRV-9")),
    "check_annotation": (check_annotation, ("ANN-1", "ANN-4", "ANN-5", "ANN-6")),
    "check_annotation_ignored": (check_annotation_ignored, ("ANN-3",)),
    "check_exec_order": (check_exec_order, ("EXO-2", "EXO-3", "EXO-4", "EXO-5", "EXO-6")),
    "check_plan_end_to_end": (check_plan_end_to_end, ("FS2-9",)),
    "check_plan_simulated": (check_plan_simulated, ("FS2-10",)),
}


# --- cases, factories, drawing ------------------------------------------------------


def as_factory_or_case(obj):
    """A ModelCase as is; a ``pkg.module:factory`` name loaded; a factory as is."""
    if isinstance(obj, str):
        return load_factory(obj)
    return obj


def run_check(check, case_or_factory, impl=None, max_examples: int = 10, shrink: bool = True):
    """``check`` on a case; on a factory, on cases drawn from its strategies
    (Hypothesis shrinks a failure to the smallest configuration, unless
    ``shrink`` is False: FS2-9, each example a world of its own), or on its
    one case when it declares none. An :class:`EnvironmentFault` stops the
    drawing at once (every later draw rejected unbuilt) and is raised as
    it is: a world too slow to judge one configuration judges none, and is
    never shrunk. So does a :class:`CaseError` a check finds in a
    configuration (FS2-9: the plan's step failing in the unsharded control
    too): raised as the case's one line, never replayed by Hypothesis (a
    world of its own each time)."""
    source = as_factory_or_case(case_or_factory)
    if isinstance(source, ModelCase):
        return _on_case(check, source, impl)
    strategies = strategies_of(source)
    if not strategies:
        return _on_case(check, build_case(source), impl)
    from hypothesis import HealthCheck, assume, example, given, settings
    from hypothesis import strategies as st
    from hypothesis.errors import Unsatisfiable

    from ..core import profiles

    # the suite's own settings (ci: derandomized, no database), never the
    # profile a user's conftest happens to load
    #: why configurations gave the check no input (no plan, say); checked: whether any did
    no_input: list[str] = []
    checked: list[bool] = []

    from hypothesis import Phase

    from ..checks import EnvironmentFault

    #: the world's fault, or the case's error a check found, that stopped the drawing
    environment: list[Exception] = []
    phases = [phase for phase in Phase if shrink or phase is not Phase.shrink]

    def declared(test):
        # the factory's declared configurations, each judged whatever is drawn (model_examples)
        for configuration in reversed(examples_of(source)):
            test = example(kwargs=configuration)(test)
        return test

    @settings(profiles.current(), max_examples=max_examples, suppress_health_check=list(HealthCheck), phases=phases)
    @declared
    @given(kwargs=st.fixed_dictionaries(strategies))
    def drawn(kwargs):
        if check is check_case:
            return check(build_case(source, **kwargs), impl)
        assume(not environment)
        # bounded: a factory none of whose configurations has an input costs
        # max_examples builds, then the draws left are rejected unbuilt
        assume(checked or len(no_input) < max_examples)
        try:
            case = build_case(source, **kwargs)
            problem = case_problem(case)
        except CaseError:
            problem = True
        # a configuration the user got wrong is check_case's finding, not this check's
        assume(problem is None)
        # before the check: a failing configuration replayed while shrinking is never rejected unbuilt
        checked.append(True)
        try:
            check(case, impl)
        except (EnvironmentFault, CaseError) as exc:
            environment.append(exc)
            assume(False)
        except NotProvided as exc:
            if not exc.case_input:
                raise
            # this configuration gives the check nothing (no plan, a graph
            # break): another may, and the check is n/p only if none does
            checked.pop()
            no_input.append(exc.reason)
            assume(False)

    try:
        drawn()
    except CaseError as exc:
        # one line already naming the shrunk configuration: not Hypothesis' notes under it
        raise CaseError(str(exc)) from None
    except Unsatisfiable:
        if environment:
            raise environment[0] from None
        if no_input:
            raise NotProvided(f"no drawn configuration of {_source_id(source)} gives this check an input "
                              f"({len(no_input)} tried; the first: {no_input[0]})", case_input=True) from None
        _not_judged(f"every drawn configuration of {_source_id(source)} is a case error (see check_case)")
    if environment:  # configurations judged before the world failed: still no verdict on the rest
        raise environment[0]


def _on_case(check, case, impl):
    if check is not check_case:
        problem = case_problem(case)
        if problem is not None:
            _not_judged(f"{problem} (the case's error, reported once by check_case)")
    return check(case, impl)


def _not_judged(reason: str):
    # skipped, not n/p: the implementation could have run, the case could not
    import pytest

    pytest.skip(reason)


def _source_id(source) -> str:
    if isinstance(source, ModelCase):
        return source.name
    if isinstance(source, str):
        return source
    return getattr(source, "__name__", type(source).__name__)


def parametrize_with_checks(cases_or_factories, impl=None, max_examples: int = 10):
    """A ``pytest.mark.parametrize`` decorator over ``(case, check)``: every
    check on every case (a ModelCase, a factory, or a ``pkg.module:factory``
    name)::

        @parametrize_with_checks([make_model, ModelCase(...)])
        def test_fsdp(case, check):
            check(case)

    ``check(case)`` runs one check (drawing a factory's configurations) on
    ``impl`` (default: the installed torch); a failure raises
    ConformanceFailure with a reproducer that imports your factory."""
    import pytest

    params = []
    for source in cases_or_factories:
        for name, (fn, _invariants) in CHECKS.items():
            bound = functools.partial(_bound, fn, impl=impl, max_examples=max_examples)
            bound.__name__ = name
            params.append(pytest.param(source, bound, id=f"{_source_id(source)}-{name}"))
    return pytest.mark.parametrize(("case", "check"), params)


def _bound(fn, case, impl=None, max_examples=10):
    import pytest

    from ..known import judge

    judge.reset()
    error = None
    try:
        run_check(fn, case, impl, max_examples)
    except CaseError as exc:
        error = str(exc)
    if error is not None:  # outside the except: no chained traceback under the one line
        # the user's mistake in one line, without the plugin's frames under it
        pytest.fail(error, pytrace=False)
    known = judge.explained()
    if known:
        # as the plugin reports it: every failing example a known bug of the
        # implementation explained, none other; never a silent pass
        pytest.xfail("known: " + ", ".join(f"{bug} ({seen['examples']} examples)" for bug, seen in known.items())
                     + " — python -m pytest_fsdpcheck.known show ID")
