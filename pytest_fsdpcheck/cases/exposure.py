"""Known-bug exposure of one model: which modelled torch bugs change *this*
model's outcome, and so on which torch releases its bucket plan, FSDP1
traversal, FSDP2 groups or exec order come out wrong, and by how much.

For every known bug with reference switches, the model's inputs are replayed
through the reference with that bug's switches on and through the plain
reference, and the outputs are compared in the spec's terms: the
DDPOptimizer buckets on the model's captured graph (count, bytes, which
parameter in which bucket), the FSDP1 states with the model's units, the
FSDP2 groups of the model's plan (managed modules and parameters per call,
whether each call is accepted) and the exec order. A bug whose switches
change the outcome is an exposure. A bug only a predicate describes cannot
be replayed: it is listed as "run on that release to know", never guessed,
where a model's tests check one of its invariants (not a bug that only the
suite's own worlds show, as SPL-16's compiled DDP and ANN-8's models).

Splitting bugs are replayed on the graph forms their code path sees (a
bug's ``forms``): the dynamo form is the graph the installed Dynamo
captures, the module form is the model traced by ``torch.fx`` with
``call_module``/``get_attr`` nodes, as Dynamo hands it to DDPOptimizer
before :data:`DYNAMO_INLINES_FROM`. A form's exposure holds only on the
releases whose Dynamo produces that form; the release range reported is
the bug's measured range cut down to those, and a bug is listed only where
that leaves a release (no bug of torch < 2.5 in a dynamo-form graph).

    python -m pytest_fsdpcheck.known exposure --model pkg.module:factory

A factory with drawn arguments is replayed on up to :data:`MAX_CONFIGURATIONS`
of its configurations (:func:`configurations`: the simplest, then the draws
adding the most argument values not seen yet), merged by bug, area and form
(:func:`model_exposure`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

from ..core.catalog import area_of
from ..impls.torch_bugs import TORCH_BUGS

#: the first minor release whose Dynamo inlines built-in modules by default
#: (parameters lifted to placeholders): earlier ones capture module-form graphs
DYNAMO_INLINES_FROM = (2, 5)
#: the minor releases the known bugs' ranges were measured on
MEASURED = tuple((2, minor) for minor in range(16))

RUN_TO_KNOW = "run on that release to know"


@dataclass(frozen=True)
class Exposure:
    #: the known bug's id
    bug: str
    #: "splitting", "traversal", "fsdp2", "exec_order"
    area: str
    #: what differs from the spec for this model, and by how much; for a
    #: predicate-only bug, RUN_TO_KNOW
    differs: str
    #: the torch releases where the model meets it ("2.4–2.15"), from the bug's
    #: range and (splitting) the releases whose Dynamo produces the exposing form
    releases: str
    #: the bug's own PEP 440 range ("" = every version) and measured releases
    affects: str
    seen: str
    #: "replayed" (reference with the bug's switches against the plain one,
    #: on ``form`` for splitting) or "predicate" (not replayable)
    how: str
    form: str | None = None
    #: a factory with drawn arguments: the configurations replayed that meet
    #: it ("depth=2, tied=True"), ``differs`` the first one's; () for one case
    configs: tuple[str, ...] = ()

    @property
    def exposed(self) -> bool:
        return self.how == "replayed"


# --- each area's outcome for one model, on any implementation --------------------------


class NotChecked(Exception):
    """An area the model gives no input for on this torch (the reason)."""


def _not_provided(fn, *args):
    """``fn(*args)``, turning the checks' NotProvided into NotChecked."""
    from ..core.not_provided import NotProvided

    try:
        return fn(*args)
    except NotProvided as exc:
        raise NotChecked(exc.reason) from None


def _raised(exc: BaseException) -> str:
    return f"raises {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"


def graphs(case) -> dict[str, tuple]:
    """``form -> (gm, example_inputs)`` of the model: the graph the installed
    Dynamo captures (its form read off its nodes) and, where that is the
    dynamo form and the model is fx-traceable, the module form. A form the
    model cannot be given in maps to the reason, a string."""
    import torch.fx

    from .inputs import captured, untraceable
    from .model import model_copy

    out: dict = {}
    try:
        gm, inputs = _not_provided(captured, case)
        out["module" if any(n.op == "call_module" for n in gm.graph.nodes) else "dynamo"] = (gm, inputs)
    except NotChecked as exc:
        out["dynamo"] = str(exc)
    if "module" not in out:
        reason = untraceable(case)
        if reason is not None:
            out["module"] = reason
        else:
            model = model_copy(case.model, case)
            gm = torch.fx.GraphModule(model, torch.fx.Tracer().trace(model))
            placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
            # fx makes a placeholder of every parameter of the forward, keyword ones and defaults too
            inputs = case.inputs_in_signature_order(model)
            for node, value in zip(placeholders, inputs, strict=False):
                node.meta["example_value"] = value
            out["module"] = (gm, inputs)
    return out


def bucket_plan(case, impl, graph) -> dict:
    """The buckets ``impl`` plans for one of the model's graphs, in graph
    order: bytes, parameter names, parameter ids (for telling a parameter
    counted twice), or what it raised."""
    from ..checks.splitting import graph_facts
    from .inputs import bucket_caps

    gm, inputs = graph
    facts = graph_facts(gm, inputs)
    cap, first = bucket_caps(case, facts)
    try:
        result = impl.splitting.split(gm, inputs, bucket_bytes_cap=cap, first_bucket_cap=first,
                                      backend=lambda sub_gm, _inputs: sub_gm.forward)
    except Exception as exc:  # noqa: BLE001 - what an implementation raises is its outcome
        return {"raised": _raised(exc)}
    return {"cap": cap, "first_cap": first,
            "buckets": [{"bytes": b.size, "params": list(b.params), "ids": list(b.param_ids)} for b in result.buckets]}


def traversal_outcome(case, make) -> dict:
    """FSDP1 states, root states and handles with the model's units, and the
    modules that collecting them changed. ``make()``: a fresh implementation
    (areas keep their states beside the modules)."""
    from ..checks.traversal import snapshot
    from .inputs import _fsdp1_tree
    from .model import unit_names

    impl = make()
    units = ["+".join(n or "<root>" for n in unit) for unit in unit_names(case)]
    tree = _fsdp1_tree(case, impl.traversal)
    unit_of = {id(state): units[sid] for sid, state in tree.states.items()}
    before = snapshot(tree)
    try:
        states, _modules = impl.traversal.states_with_modules(tree.root)
        roots = impl.traversal.root_states(tree.root)
        handles = impl.traversal.handles(tree.root)
    except Exception as exc:  # noqa: BLE001
        return {"raised": _raised(exc)}
    after = snapshot(tree)
    names = {id(m): n or "<root>" for n, m in tree.root.named_modules()}
    touched = sorted(names[id(m)] for m, b, a in zip(tree.modules, before[0], after[0], strict=True) if b != a)
    return {"states": [unit_of.get(id(s), "?") for s in states], "root_states": [unit_of.get(id(s), "?") for s in roots],
            "handles": len(handles), "modules_changed": touched}


def fsdp2_outcome(case, make) -> dict:
    """Per call of the model's recorded plan, as the earlier calls leave the
    model: the managed modules and parameters, and whether ``annotate``
    (fully_shard as specified) accepts the call."""
    from .inputs import _copy, recorded
    from .probe import _raise_plan_error
    from .replay import PlanReplay

    if case.plan is None:
        raise NotChecked(f"case {case.name!r} gives no FSDP2 plan")
    record = recorded(case)
    _raise_plan_error(record)
    area = make().fsdp2
    groups = []
    for step in PlanReplay(record, _copy(record), area):
        label = step.call.label()
        try:
            managed = area.managed_modules(step.roots, step.ignored)
            params, _buffers = area.managed_states(managed, step.ignored)
            group = {"call": label, "modules": step.oracle.labels(managed), "params": step.oracle.labels(params)}
        except Exception as exc:  # noqa: BLE001
            group = {"call": label, "raised": _raised(exc)}
        groups.append(group)
    return {"groups": groups, "accepted": _annotated(record, make().fsdp2)}


def _annotated(record, area) -> list[str]:
    """Each call through ``area``'s ``annotate`` (a fresh area: it keeps what
    earlier calls managed), in the plan's order, on another copy of the
    model: "accepted" or what it raised (the plan stops there)."""
    from .inputs import _copy
    from .replay import PlanReplay

    out = []
    for step in PlanReplay(record, _copy(record), area):
        try:
            area.annotate(step.roots, None, step.ignored)
        except Exception as exc:  # noqa: BLE001
            out.append(f"{step.call.label()} {_raised(exc)}")
            break
        out.append(f"{step.call.label()} accepted")
    return out


def exec_order_outcome(case, make) -> dict:
    import torch.fx

    from .inputs import _Labelled, untraceable
    from .model import model_copy

    reason = untraceable(case)
    if reason is not None:
        raise NotChecked(reason)
    impl = make()
    model = model_copy(case.model, case)
    labels = _Labelled(model)
    params = {id(p): n for n, p in model.named_parameters()}
    tracer = torch.fx.Tracer()
    try:
        with impl.exec_order.patch_tracer(tracer, model) as info:
            tracer.trace(model)
    except Exception as exc:  # noqa: BLE001
        return {"raised": _raised(exc)}
    usage = {labels.label(m): [[labels.label(u), [n for n, _ in named]] for u, named in uses]
             for m, uses in info.module_to_param_usage_infos.items()}
    return {"modules": [labels.label(m) for m in info.module_forward_order],
            "params": [params.get(id(p), "?") for p in info.param_forward_order], "usage": usage,
            "tracer_keeps": sorted(k for k in ("call_module", "create_proxy") if k in tracer.__dict__)}


_OUTCOMES = {"traversal": traversal_outcome, "fsdp2": fsdp2_outcome, "exec_order": exec_order_outcome}


# --- what differs, in words ----------------------------------------------------------


def graph_tensors(graph) -> tuple[dict[int, int], dict[int, str], dict[int, int]]:
    """For one graph: bytes and a readable name per parameter id, and the id
    of the real tensor behind each placeholder's example value (a split may
    name the fake one)."""
    import re

    import torch

    from ..checks.splitting import real_ids

    gm, inputs = graph
    sizes, names = {}, {}
    for name, p in gm.named_parameters(remove_duplicate=True):
        sizes[id(p)], names[id(p)] = p.untyped_storage().nbytes(), name
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, inputs, strict=False):
        if not isinstance(value, torch.Tensor):
            continue
        sizes[id(value)] = value.untyped_storage().nbytes()
        # Dynamo names a lifted parameter after its path: l_self_modules_embed_parameters_weight_
        path = re.sub(r"^[lL]_self_|_$", "", str(node.target))
        parts = re.split(r"(?:^|_)(?:modules|parameters|buffers)_", path)
        names[id(value)] = ".".join(p for p in parts if p) if path != str(node.target) else str(node.target)
    real = {fake: id(value) for fake, value in real_ids(gm, inputs).items()}
    return sizes, names, real


def bucket_differences(plain: dict, buggy: dict, graph) -> list[str]:
    """How ``buggy``'s bucket plan departs from ``plain``'s (the spec's),
    buckets numbered in graph order from 0."""
    if "raised" in plain or "raised" in buggy:
        return [] if plain == buggy else [f"the split {buggy.get('raised', 'succeeds')} (spec: {plain.get('raised', 'succeeds')})"]
    sizes, names, real = graph_tensors(graph)
    want = [[real.get(p, p) for p in b["ids"]] for b in plain["buckets"]]
    got = [[real.get(p, p) for p in b["ids"]] for b in buggy["buckets"]]
    out = []
    if len(want) != len(got):
        out.append(f"{len(got)} buckets instead of {len(want)}")
    home = {pid: i for i, ids in enumerate(want) for pid in ids}
    where: dict[int, list[int]] = {}
    for i, ids in enumerate(got):
        for pid in ids:
            where.setdefault(pid, []).append(i)
    same_count = len(want) == len(got)
    predicted = [b["bytes"] for b in plain["buckets"]] if same_count else None
    moved = []
    for pid, buckets in where.items():
        size, name = sizes.get(pid, 0), names.get(pid, "?")
        # the spec counts a parameter at the latest node reading it: an extra
        # count is the earlier one
        primary = home[pid] if home.get(pid) in buckets else buckets[-1]
        extra = list(buckets)
        extra.remove(primary)
        for i in extra:
            times = "twice" if len(buckets) == 2 else f"{len(buckets)} times"
            out.append(f"bucket {i} counts {size:,} bytes {times} ({name})")
        if same_count and pid in home and primary != home[pid]:
            moved.append((name, size, primary, home[pid]))
        if predicted is not None:
            for i in extra:
                predicted[i] += size
            if pid in home and primary != home[pid]:
                predicted[primary] += size
                predicted[home[pid]] -= size
            elif pid not in home:
                predicted[primary] += size
    if len(moved) > 3:
        name, _size, i, j = moved[0]
        out.append(f"{len(moved)} parameters ({sum(m[1] for m in moved):,} bytes) in other buckets "
                   f"({name} in bucket {i} instead of {j}, ...)")
    else:
        out += [f"{name} ({size:,} bytes) counted in bucket {i} instead of {j}" for name, size, i, j in moved]
    for pid, i in home.items():
        if pid not in where:
            out.append(f"{names.get(pid, '?')} ({sizes.get(pid, 0):,} bytes) not counted in any bucket")
            if predicted is not None:
                predicted[i] -= sizes.get(pid, 0)
    if predicted is not None:
        # sizes the differences above do not account for (a different storage size, say)
        for i, (p, b) in enumerate(zip(predicted, buggy["buckets"], strict=True)):
            if p != b["bytes"]:
                out.append(f"bucket {i} is {b['bytes']:,} bytes instead of {plain['buckets'][i]['bytes']:,}")
    else:
        out[0] += " (bytes per bucket " + ", ".join(f"{b['bytes']:,}" for b in buggy["buckets"]) \
            + " instead of " + ", ".join(f"{b['bytes']:,}" for b in plain["buckets"]) + ")"
    return out


def _differences(area: str, plain: dict, buggy: dict) -> list[str]:
    if plain == buggy:
        return []
    if "raised" in plain or "raised" in buggy:
        return [f"{_AREA_WORDS[area]} {buggy.get('raised', 'succeeds')} (spec: {plain.get('raised', 'succeeds')})"]
    out = []
    for key in plain:
        if plain[key] == buggy.get(key):
            continue
        if area == "fsdp2" and key == "groups":
            for w, g in zip(plain[key], buggy[key], strict=True):
                if w != g:
                    out.append(f"{g['call']}: {_group_words(g)} instead of {_group_words(w)}")
        elif area == "fsdp2" and key == "accepted":
            out += [f"{g} (spec: {w})" for w, g in zip(plain[key], buggy[key], strict=False) if w != g]
            out += [f"{g} (spec: the plan stops before it)" for g in buggy[key][len(plain[key]):]]
        elif key == "modules_changed":
            out.append(f"collecting FSDP1 states changes {len(buggy[key])} modules ({', '.join(buggy[key][:4])}"
                       f"{', ...' if len(buggy[key]) > 4 else ''}); the spec changes none")
        elif key == "tracer_keeps":
            out.append(f"after tracing, the tracer instance keeps {', '.join(buggy[key])} in its __dict__")
        else:
            out.append(f"{_KEY_WORDS.get(key, key)}: {_short(buggy[key])} instead of {_short(plain[key])}")
    return out


_AREA_WORDS = {"traversal": "collecting FSDP1 states", "fsdp2": "the FSDP2 walk", "exec_order": "exec-order tracing"}
_KEY_WORDS = {"states": "FSDP1 states in order", "root_states": "root states", "handles": "handles",
              "modules": "module forward order", "params": "parameter forward order", "usage": "parameter usage"}


def _group_words(group: dict) -> str:
    if "raised" in group:
        return group["raised"]
    return f"{len(group['modules'])} modules, {len(group['params'])} parameters {_short(group['params'])}"


def _short(value, limit=120) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- release ranges ------------------------------------------------------------------


def _form_releases(form: str | None):
    if form == "module":
        return lambda minor: minor < DYNAMO_INLINES_FROM
    if form == "dynamo":
        return lambda minor: minor >= DYNAMO_INLINES_FROM
    return lambda minor: True


def shown_on(bug, form: str | None = None) -> list[tuple[int, int]]:
    """The measured minor releases in ``bug``'s range whose Dynamo gives
    ``form`` (any form: ``None``): where a model can meet it."""
    return [m for m in MEASURED if bug.applies_to_version(f"{m[0]}.{m[1]}.0") and _form_releases(form)(m)]


def releases(bug, form: str | None = None) -> str:
    """The measured minor releases the model meets ``bug`` on, as ranges
    ("2.4–2.15"; "2.0–2.3, 2.5"), or "none measured"."""
    hit = shown_on(bug, form)
    if not hit:
        return "none measured"
    spans, start, prev = [], hit[0], hit[0]
    for m in hit[1:]:
        if m[1] != prev[1] + 1:
            spans.append((start, prev))
            start = m
        prev = m
    spans.append((start, prev))
    return ", ".join(f"{a[0]}.{a[1]}" if a == b else f"{a[0]}.{a[1]}–{b[0]}.{b[1]}" for a, b in spans)


# --- exposure ------------------------------------------------------------------------


def _bug_areas(bug) -> set[str]:
    return {area_of(i) for i in bug.invariants}


def exposure(case, bugs=TORCH_BUGS) -> list[Exposure]:
    """The known bugs (default: torch's) that change ``case``'s outcome, one
    :class:`Exposure` per bug and area (and graph form, where the forms
    expose it on different releases); then the predicate-only bugs of the
    areas the model is checked in, as RUN_TO_KNOW."""
    from ..impls.reference import ReferenceImplementation
    from ..known.reference_with import reference_with

    found: list[Exposure] = []
    plain: dict = {}  # area or ("splitting", form) -> the spec's outcome, or _NOT_CHECKED
    forms: list = []

    def graph(form):
        if not forms:
            forms.append(graphs(case))
        return forms[0].get(form)

    def spec_outcome(area):
        if area not in plain:
            try:
                plain[area] = _OUTCOMES[area](case, ReferenceImplementation)
            except NotChecked:
                plain[area] = _NOT_CHECKED
        return plain[area]

    for bug in bugs:
        for area in bug.reference:
            def buggy(bug=bug):
                return reference_with([bug])

            if area == "splitting":
                # a form no release in the bug's range gives its Dynamo: no model meets it there
                for form in [f for f in bug.forms or ("dynamo", "module") if shown_on(bug, f)]:
                    g = graph(form)
                    if not isinstance(g, tuple):
                        continue
                    key = ("splitting", form)
                    if key not in plain:
                        plain[key] = bucket_plan(case, ReferenceImplementation(), g)
                    diffs = bucket_differences(plain[key], bucket_plan(case, buggy(), g), g)
                    if diffs:
                        found.append(_exposure(bug, area, "; ".join(diffs), form))
                continue
            if area not in _OUTCOMES or not shown_on(bug) or spec_outcome(area) is _NOT_CHECKED:
                continue
            diffs = _differences(area, plain[area], _OUTCOMES[area](case, buggy))
            if diffs:
                found.append(_exposure(bug, area, "; ".join(diffs)))
    def provided(area) -> bool:
        """Whether the model gives the area an input on this torch."""
        if area == "splitting":
            return any(isinstance(graph(form), tuple) for form in ("dynamo", "module"))
        if area == "fsdp2":
            return case.plan is not None
        if area == "exec_order":
            from .inputs import untraceable

            return untraceable(case) is None
        return True

    from .checks import CHECKS

    # a predicate's invariants as a model's tests check them: a bug only the
    # suite's own worlds show (SPL-16's compiled DDP, ANN-8's Dynamo models)
    # is never this model's to run and know
    on_models = {inv for _check, invariants in CHECKS.values() for inv in invariants}
    for bug in bugs:
        if bug.predicate is None or not shown_on(bug) or not on_models & set(bug.invariants):
            continue
        areas = [a for a in sorted(_bug_areas(bug)) if provided(a)]
        if areas:
            found.append(Exposure(bug.id, areas[0], RUN_TO_KNOW, releases(bug), bug.affects, bug.seen_range, "predicate"))
    return found


_NOT_CHECKED = object()


def _exposure(bug, area, differs, form=None) -> Exposure:
    how = "replayed"
    return Exposure(bug.id, area, differs, releases(bug, form), bug.affects, bug.seen_range, how, form)


def not_checked(case) -> list[str]:
    """Why areas of the model could not be compared (no plan, graph breaks...)."""
    out = []
    for form, graph in graphs(case).items():
        if not isinstance(graph, tuple):
            out.append(f"bucket plan ({form} form) not compared: {graph}")
    if case.plan is None:
        out.append("FSDP2 groups not compared: the case gives no plan")
    from .inputs import untraceable

    reason = untraceable(case)
    if reason:
        out.append(f"exec order not compared: {reason}")
    return out


_AREA_TITLE = {"splitting": "bucket plan", "traversal": "FSDP1 traversal", "fsdp2": "FSDP2 groups",
               "exec_order": "exec order"}


def render(exposures: list[Exposure], name: str | None = None) -> list[str]:
    """Report lines: one per exposure ("bucket 2 counts 4,096 bytes twice
    (w): spl-param-counted-per-use, torch 2.4–2.15"), the predicate-only
    bugs after them."""
    head = f"known-bug exposure of {name}" if name else "known-bug exposure"
    replayed = [e for e in exposures if e.exposed]
    lines = [f"{head}: {len(replayed)} modelled torch bug(s) change its outcome"
             + (" (buckets numbered in graph order from 0)" if any(e.area == "splitting" for e in replayed) else "")]
    for e in replayed:
        form = f", {e.form}-form graph" if e.form else ""
        # what differs is the first configuration's
        drawn = (f" (in {e.configs[0]}" + "".join(f"; also {c}" for c in e.configs[1:]) + ")") if e.configs else ""
        lines.append(f"  {_AREA_TITLE.get(e.area, e.area)}{form}: {e.differs}: {e.bug}, torch {e.releases}{drawn}")
    for e in exposures:
        if not e.exposed:
            lines.append(f"  {_AREA_TITLE.get(e.area, e.area)}: {e.bug} (torch {e.releases}): {RUN_TO_KNOW}")
    return lines


def to_json(exposures: list[Exposure]) -> list[dict]:
    return [{**asdict(e), "exposed": e.exposed} for e in exposures]


def bugs_between(exposures: list[Exposure], before: str, after: str) -> list[str]:
    """The exposed bugs that hold on exactly one of two torch releases (the
    ones that explain a difference between them)."""
    from ..impls.torch_bugs import TORCH_BUGS as known

    by_id = {b.id: b for b in known}
    out = []
    for e in exposures:
        bug = by_id.get(e.bug)
        if not e.exposed or bug is None:
            continue
        if _holds(bug, e.form, before) != _holds(bug, e.form, after) and e.bug not in out:
            out.append(e.bug)
    return out


def _holds(bug, form, version: str) -> bool:
    minor = tuple(int(p) for p in version.split("+")[0].split(".")[:2])
    return bug.applies_to_version(version) and _form_releases(form)(minor)


# --- command line ---------------------------------------------------------------------


def case_of(spec: str):
    """The case a ``pkg.module:factory`` name builds, with each declared
    strategy's simplest value (as the plugin validates it)."""
    from .model import simplest_case

    return simplest_case(spec)


#: how many of a drawn factory's configurations exposure replays: the simplest
#: and the draws that differ most from those before them (each costs a Dynamo
#: capture, an fx trace, a plan recording and a replay per bug: 1-3 s here)
MAX_CONFIGURATIONS = 4


def configurations(factory, limit: int = MAX_CONFIGURATIONS) -> list[dict]:
    """Keyword arguments of up to ``limit`` configurations of ``factory``:
    each declared strategy's simplest value first, then, from a derandomized
    Hypothesis draw, the configuration giving the most argument values not
    seen yet, and so on. ``[{}]`` for a factory without strategies."""
    from .model import strategies_of

    strategies = strategies_of(factory)
    if not strategies:
        return [{}]
    from hypothesis import HealthCheck, Phase, find, given, settings
    from hypothesis import strategies as st

    from ..core import profiles

    chosen = [{name: find(strategy, lambda _value: True) for name, strategy in strategies.items()}]
    drawn: list[dict] = []

    @settings(profiles.current(), derandomize=True, database=None, max_examples=10 * limit,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck), deadline=None)
    @given(st.fixed_dictionaries(strategies))
    def draw(kwargs):
        drawn.append(kwargs)

    draw()

    def values(kwargs) -> set:
        return {(name, repr(value)) for name, value in kwargs.items()}

    covered = values(chosen[0])
    left = {repr(sorted(k.items())): k for k in drawn}
    left.pop(repr(sorted(chosen[0].items())), None)
    while len(chosen) < limit and left:
        # max keeps the first of equals: the draw order, which is the same every run
        key = max(left, key=lambda k: len(values(left[k]) - covered))
        chosen.append(left.pop(key))
        covered |= values(chosen[-1])
    return chosen


def model_exposure(spec, limit: int = MAX_CONFIGURATIONS) -> list[Exposure]:
    """The exposure of a ``pkg.module:factory`` name (or a factory): of its
    one case, or, for a factory with drawn arguments, merged over
    :func:`configurations` (a tied configuration meets the tied-weight bugs
    the simplest one may not), each exposure naming the configurations that
    meet it. A configuration that is a case error is left out; all of them:
    the first one's :class:`CaseError`."""
    from .model import CaseError, build_case, load_factory

    factory = load_factory(spec) if isinstance(spec, str) else spec
    configs = configurations(factory, limit)
    if configs == [{}]:
        return exposure(build_case(factory))
    merged: dict[tuple, Exposure] = {}
    first_error = None
    for kwargs in configs:
        try:
            found = exposure(build_case(factory, **kwargs))
        except CaseError as exc:
            first_error = first_error or exc
            continue
        label = ", ".join(f"{k}={v!r}" for k, v in sorted(kwargs.items()))
        for e in found:
            key = (e.bug, e.area, e.form, e.how)
            seen = merged.get(key)
            merged[key] = replace(e, configs=(label,)) if seen is None else replace(seen, configs=(*seen.configs, label))
    if not merged and first_error is not None:
        raise first_error
    return list(merged.values())


def main(specs: list[str], json_path: str | None = None) -> int:
    """``python -m pytest_fsdpcheck.known exposure --model SPEC``: exit 0 with
    the report, 2 when a model cannot be built (one line naming why)."""
    import sys

    from .model import CaseError

    report = {}
    for spec in specs:
        try:
            case = case_of(spec)
            found = model_exposure(spec)
        except CaseError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        skipped = not_checked(case)
        drawn = sorted({c for e in found for c in e.configs})
        # a drawn factory: its name, not the simplest configuration's, heads what several configurations met
        name = f"{case.name.partition('[')[0]} over drawn configurations" if drawn else case.name
        print("\n".join(render(found, f"{name} ({spec})") + [f"  {line}" for line in skipped]))
        report[spec] = {"case": case.name, "exposures": to_json(found), "not_compared": skipped}
    if json_path:
        from pathlib import Path

        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
    return 0


# --- a model's outcome on the installed torch (for the history per model) ---------


def model_outcome(case) -> dict:
    """What the installed torch does with the model: its DDPOptimizer bucket
    plan on the graph its Dynamo captures (bytes and parameters per bucket,
    graph order) and its FSDP2 groups (managed modules and parameters inside
    each of the plan's real ``fully_shard`` calls). JSON-ready."""
    import torch

    from ..impls import load_implementation

    out: dict = {"torch": torch.__version__}
    impl = load_implementation("torch")
    from .inputs import captured

    try:
        graph = _not_provided(captured, case)
    except NotChecked as exc:
        graph = None
        out["buckets"] = f"not provided: {exc}"
    if graph is not None and getattr(impl, "splitting", None) is None:
        out["buckets"] = "not provided: the torch implementation has no splitting area"
    elif graph is not None:
        form = "module" if any(n.op == "call_module" for n in graph[0].graph.nodes) else "dynamo"
        plan = bucket_plan(case, impl, graph)
        if "raised" in plan:
            out["buckets"] = plan["raised"]
        else:
            _sizes, names, real = graph_tensors(graph)
            out["form"] = form
            out["buckets"] = [{"bytes": b["bytes"], "params": [names.get(real.get(p, p), n) for p, n in zip(b["ids"], b["params"], strict=True)]}
                              for b in plan["buckets"]]
    if case.plan is None:
        out["groups"] = None
    else:
        from .inputs import recorded

        try:
            record = recorded(case)
        except Exception as exc:  # noqa: BLE001 - a torch without fully_shard, say
            out["groups"] = _raised(exc)
        else:
            out["groups"] = [{"call": c.label(), "modules": c.walk, "params": c.params,
                              **({"error": _raised(c.error)} if c.error is not None else {})} for c in record.calls]
    return out


def holding(exposures: list[Exposure], version: str) -> list[str]:
    """The exposed bugs the model meets on ``version`` (by range and form)."""
    from ..impls.torch_bugs import TORCH_BUGS as known

    by_id = {b.id: b for b in known}
    return list(dict.fromkeys(e.bug for e in exposures if e.exposed and e.bug in by_id
                              and _holds(by_id[e.bug], e.form, version)))
