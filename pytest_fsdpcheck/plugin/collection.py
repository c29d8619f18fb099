"""Which suite tests run, with which parameters, in which order.

The suite ships inside the package and is collected from wherever it is
installed. Only its own tests (those under :func:`conformance_dir`) are
parametrized, tagged or reordered; a user's tests in the same run are left
exactly as pytest collected them.
"""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path

import pytest

from ..core.catalog import area_of
from ..core.not_provided import PREFIX
from ..report.verdict import PROP_IMPL, PROP_INVARIANTS, PROP_MODEL, PROP_NOT_PROVIDED, model_id

_CORPUS_MODULE = "test_golden.py"


@functools.cache
def conformance_dir() -> Path:
    from importlib.util import find_spec

    spec = find_spec("pytest_fsdpcheck.conformance")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    # a source checkout on the import path (PYTHONPATH=<checkout>) rather
    # than the installed package: the suite sits beside the package there
    beside = Path(__file__).resolve().parents[2] / "conformance"
    if beside.is_dir():
        return beside
    raise pytest.UsageError(
        f"fsdpcheck: pytest_fsdpcheck imported from {Path(__file__).parent} has no conformance suite; "
        "install the package (pip install pytest-fsdpcheck) rather than putting its source on the import path")


def inside(path, folder: Path) -> bool:
    try:
        Path(path).resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def is_suite_test(node) -> bool:
    """Only the shipped suite's tests are the plugin's to parametrize."""
    return inside(node.path, conformance_dir())


def add_suite_paths(config) -> None:
    """The suite's path among the run's paths (``config.args``: the
    positional arguments, never an option's value). With no paths given the
    suite is all that runs under ``--fsdpcheck``, and runs beside the
    project's own tests where the ini file enables it; with paths, the suite runs beside them unless one
    is inside it. A suite file named bare, as the summary prints a test id
    (``test_traversal.py::test_root_states[torch]``), and missing here, is
    the suite's; any other missing path stays missing, for pytest to say so."""
    suite = conformance_dir()
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        if config.getoption("fsdpcheck", None):
            config.args[:] = [str(suite)]
        elif not any(inside(suite, Path(arg)) or inside(arg, suite) for arg in config.args):
            # enabled in the ini file: a plain `pytest -k test_mine` is still the
            # project's run (testpaths, or the folder pytest runs in), the suite beside it
            config.args.append(str(suite))
        return
    picked = False
    wanted = []
    for i, arg in enumerate(config.args):
        path, sep, rest = arg.partition("::")
        if os.path.exists(path):
            picked = picked or inside(path, suite)
        elif path == os.path.basename(path) and path.endswith(".py") and (suite / path).is_file():
            # The suite's folder runs, narrowed to this id afterwards
            # (select_node_ids): given as a file of its own, the file would be
            # an initial path of the run and its tests' ids would lose the
            # file part ("FAILED ::test_root_states[torch]").
            wanted.append(arg)
            config.args[i] = None
    if wanted:
        config.args[:] = [arg for arg in config.args if arg is not None]
        if not any(inside(arg.partition("::")[0], suite) for arg in config.args if os.path.exists(arg.partition("::")[0])):
            config.args.append(str(suite))
        # an option's namespace reaches xdist's workers, which run this again
        # on the rewritten arguments
        config.option.fsdpcheck_node_ids = wanted
        picked = True
    if not picked:
        config.args.append(str(suite))


def select_node_ids(config, items) -> None:
    """Only the suite's tests the run named by id (``test_traversal.py::
    test_root_states[torch]``, every parametrization of a name, or a whole
    file), when it named any; the rest deselected, the user's own untouched."""
    wanted = getattr(config.option, "fsdpcheck_node_ids", None)
    if not wanted:
        return

    def named(item) -> bool:
        return any(item.nodeid == want or item.nodeid.startswith((want + "[", want + "::"))
                   for want in wanted)

    removed = [item for item in items if is_suite_test(item) and not named(item)]
    if removed:
        config.hook.pytest_deselected(items=removed)
        gone = {id(item) for item in removed}
        items[:] = [item for item in items if id(item) not in gone]


def invariants_of(item) -> list[str]:
    ids: list[str] = []
    for mark in item.iter_markers("invariant"):
        ids.extend(mark.args)
    return list(dict.fromkeys(ids))


def impl_id(session, callspec) -> str | None:
    if callspec is None or "fsdpcheck_impl" not in callspec.params:
        return None
    impl = callspec.params["fsdpcheck_impl"]
    return next((spec for spec, obj in session.impls.items() if obj is impl), None)


def not_provided_at_collection(spec: str, impl, areas, form: str | None) -> str | None:
    """Why a suite item is not provided before it runs (an area the
    implementation lacks, a graph form its splitting does not accept), or None."""
    missing = [a for a in sorted(areas) if getattr(impl, a, None) is None]
    if missing:
        return f"{spec} has no {', '.join(missing)} area"
    if form is None:
        return None
    from ..contract import accepted_forms

    accepted = accepted_forms(impl.splitting)
    return None if form in accepted else f"{spec} accepts {' and '.join(accepted)}-form graphs, not {form} form"


def parametrize(metafunc, session) -> None:
    """One item per implementation (and graph form, device, shard) of a suite test."""
    if ("fsdpcheck_impl" not in metafunc.fixturenames and "fsdpcheck_model_case" in metafunc.fixturenames
            and session is not None and is_suite_test(metafunc.definition)):
        # the user's case itself (test_model_case): one item per model, in no implementation's column
        metafunc.parametrize("fsdpcheck_model_case", session.models, ids=[model_id(m) for m in session.models])
        return
    if "fsdpcheck_impl" not in metafunc.fixturenames or not is_suite_test(metafunc.definition):
        return
    if session is None:
        skip = pytest.mark.skip(reason="pytest-fsdpcheck suite: run with --fsdpcheck")
        metafunc.parametrize("fsdpcheck_impl", [pytest.param(None, marks=skip)], ids=["disabled"])
        return
    areas = {area_of(i) for i in invariants_of(metafunc.definition)}
    # A splitting check asking for a graph form runs once per form, the form
    # in its id ("torch-module"), so one form's known bug hides nothing in the other.
    forms = "fsdpcheck_graph_form" in metafunc.fixturenames
    params = []

    def marks(spec, impl, form=None):
        reason = not_provided_at_collection(spec, impl, areas, form)
        return [pytest.mark.skip(reason=PREFIX + reason)] if reason else []

    for spec, impl in session.impls.items():
        if not forms:
            params.append(pytest.param(impl, marks=marks(spec, impl), id=spec))
            continue
        from ..contract import GRAPH_FORMS

        for form in GRAPH_FORMS:
            params.append(pytest.param(impl, form, marks=marks(spec, impl, form), id=f"{spec}-{form}"))
    metafunc.parametrize(("fsdpcheck_impl", "fsdpcheck_graph_form") if forms else "fsdpcheck_impl", params)
    if "fsdpcheck_device" in metafunc.fixturenames:
        metafunc.parametrize("fsdpcheck_device", session.devices)
    if "fsdpcheck_model_case" in metafunc.fixturenames:
        metafunc.parametrize("fsdpcheck_model_case", session.models, ids=[model_id(m) for m in session.models])
    plan = session.plan
    if plan is not None and plan.workers > 1 and getattr(metafunc.function, "is_hypothesis_test", False):
        # one item per worker, each running its own part of the seed stream
        metafunc.fixturenames.append("fsdpcheck_shard")
        shards = range(plan.workers)
        metafunc.parametrize("fsdpcheck_shard", shards, ids=[f"shard{k + 1}of{plan.workers}" for k in shards])


#: the suite module that runs users' models; it has no input without one
_MODELS_MODULE = "test_models.py"


def ignore(collection_path, session) -> bool:
    """The users'-models module is not collected when no model is named."""
    return (session is not None and not session.models and collection_path.name == _MODELS_MODULE
            and inside(collection_path, conformance_dir()))


def tag(session, items) -> None:
    """Invariants and implementation on each suite item (they travel with its
    reports, across xdist), and the divergence entries its id matches."""
    from ..known import divergences as div
    from .verdicts import trim_traceback

    for item in items:
        invariants = invariants_of(item)
        callspec = getattr(item, "callspec", None)
        spec = impl_id(session, callspec)
        if not invariants or spec is None or not is_suite_test(item):
            continue
        item.user_properties.append((PROP_INVARIANTS, invariants))
        item.user_properties.append((PROP_IMPL, spec))
        model = callspec.params.get("fsdpcheck_model_case")
        if isinstance(model, str):
            # a user's model's check: its cells are the model's own too (report.Matrix.models)
            item.user_properties.append((PROP_MODEL, model))
        impl = callspec.params["fsdpcheck_impl"]
        reason = not_provided_at_collection(spec, impl, {area_of(i) for i in invariants},
                                            callspec.params.get("fsdpcheck_graph_form"))
        if reason:
            item.user_properties.append((PROP_NOT_PROVIDED, reason))
        session.matched_entries.update(div.matching(session.divergences, spec, item.nodeid, invariants))
        item._traceback_filter = functools.partial(trim_traceback, item)
        fn = getattr(item, "obj", None)
        if getattr(fn, "is_hypothesis_test", False):
            from .fuzz import instrument

            instrument(fn)


def record_deselected(session, items) -> None:
    for item in items:
        spec = impl_id(session, getattr(item, "callspec", None))
        if spec is not None:
            session.deselected.update((spec, inv) for inv in invariants_of(item))


def is_suite_item(item) -> bool:
    return PROP_IMPL in dict(item.user_properties)


#: What a suite test costs, cheapest first: a developer running ``-x`` after
#: each change hears of a broken implementation from the cheapest check that
#: can see it. Each test says its own with ``@pytest.mark.fsdpcheck_cost``
#: (a module's ``pytestmark`` for all its tests, a test's own mark over it):
#: its class (one of these; "single call" where none is marked), ``slow=True``
#: for a property that takes several times its class's others (measured on
#: the reference, torch 2.13: 1.3-4.2 s against 0.2-0.9 s; last in its
#: class), ``seconds`` for a fixed test a time budget counts otherwise than
#: its class (:data:`_CLASS_SECONDS`), ``round_s`` for a property whose one
#: round takes longer than FIRST_ROUND_S.
COST_CLASSES = ("single call", "large inputs", "corpus", "compile", "processes")
COST_MARK = "fsdpcheck_cost"


def cost_of(item) -> dict:
    """What ``item``'s cost marks say, the closest first (the test's own
    over its module's): {"class", "slow", "seconds", "round_s"} as given."""
    found: dict = {}
    # a bare item-like object (a node id and a path) has no marks: the default class
    iter_markers = getattr(item, "iter_markers", None)
    for mark in iter_markers(name=COST_MARK) if iter_markers is not None else ():
        if mark.args:
            found.setdefault("class", mark.args[0])
        for key, value in mark.kwargs.items():
            found.setdefault(key, value)
    unknown = set(found) - {"class", "slow", "seconds", "round_s"}
    if unknown or found.get("class", COST_CLASSES[0]) not in COST_CLASSES:
        raise pytest.UsageError(f"fsdpcheck: {item.nodeid}: @pytest.mark.{COST_MARK} takes one of {COST_CLASSES} "
                                f"and slow=, seconds=, round_s=; got {found}")
    return found


#: Suite modules split off another one for size alone, by the module they
#: were split from: the areas take turns, and a module of an area's tests
#: split in two would otherwise take two turns where the area had one.
_TURN_OF_MODULE = {"test_splitting_compiled.py": "test_splitting.py"}


def _name(item) -> str:
    # a bare item-like object (a node id and a path) is enough to be ordered
    name = getattr(item, "name", None) or item.nodeid.rpartition("::")[2]
    return getattr(item, "originalname", None) or name.partition("[")[0]


def cost_class(item) -> int:
    return COST_CLASSES.index(cost_of(item).get("class", COST_CLASSES[0]))


def is_growth_check(item) -> bool:
    """A growth-ratio check among the large inputs (TRV-8, FS2-6, EXO's
    linear time): it times the implementation on inputs sized so that a
    quadratic one still finishes in seconds, where a single
    100,000-module tree of the same class takes it minutes (a visited
    list: 5 s against over 2 minutes)."""
    return cost_class(item) == COST_CLASSES.index("large inputs") and "linear_growth" in _name(item)


def _cost_key(items) -> dict:
    """Per item: its class, then, inside a class, growth-ratio checks first,
    fixed cases before properties, slow properties last, and the areas
    taking turns (each area's first check before any area's second), so a
    bug in any area meets a check that sees it within the first few seconds."""
    turn: dict = {}
    keys = {}
    for item in items:
        is_property = bool(getattr(getattr(item, "obj", None), "is_hypothesis_test", False))
        slow = bool(cost_of(item).get("slow"))
        group = (cost_class(item), not is_growth_check(item), is_property, slow,
                 _TURN_OF_MODULE.get(item.path.name, item.path.name))
        turn[group] = turn.get(group, -1) + 1
        keys[item.nodeid] = (*group[:-1], turn[group])
    return keys


def order(session, items) -> None:
    """Suite items cheapest first (a property with a failing example in the
    example database before everything, the areas an implementation lacks
    last), user items where they were; corpus
    models kept together. Before deselection, which keeps the order, and
    before xdist's workers report what they collected, so every worker's
    share follows it."""
    slots = [i for i, item in enumerate(items) if is_suite_item(item)]
    suite = [items[i] for i in slots]
    saved = _with_saved_failures(session, suite)
    cost = _cost_key(suite)
    # an area the implementation lacks is a skip, known now: it tells nothing, so it goes last
    ranked = sorted(suite, key=lambda item: (item.nodeid not in saved, PROP_NOT_PROVIDED in dict(item.user_properties),
                                             cost[item.nodeid]))
    for i, item in zip(slots, ranked, strict=True):
        items[i] = item
    group_by_corpus_model(items)


def share_budget(session, items) -> None:
    """Under a time budget, the features' floors first, then the fixed
    cases, and each property's share of the budget set."""
    if session.plan is None or session.plan.budget_s is None:
        return
    from .fuzz import FIRST_ROUND_S, Slicer, floor_of

    def is_budgeted(item):
        props = dict(item.user_properties)
        return getattr(getattr(item, "obj", None), "is_hypothesis_test", False) and PROP_IMPL in props and PROP_NOT_PROVIDED not in props

    def key(item):
        # Each feature's floor (features.FLOORS) first: the budget may not fit
        # one round of every property, nor the fixed cases' estimates hold on
        # a loaded machine. Then the fixed cases: the properties then share
        # whatever time is left. Shard-major: xdist hands out consecutive
        # items in chunks, so a property's shards far apart land on
        # different workers.
        shard = getattr(item, "callspec", None) and item.callspec.params.get("fsdpcheck_shard", 0) or 0
        budgeted = bool(is_budgeted(item))
        return (not (budgeted and floor_of(item)), budgeted, shard)

    items.sort(key=key)
    floors = sum(1 for item in items if is_budgeted(item) and floor_of(item))
    _deal_floors(items, floors, session.plan.workers)
    budgeted = [item.nodeid for item in items if is_budgeted(item)]
    fixed, builds = {}, {}
    for item in items:
        if is_suite_item(item) and not is_budgeted(item) and PROP_NOT_PROVIDED not in dict(item.user_properties):
            fixed[item.nodeid] = fixed_cost_s(item)
            model = getattr(getattr(item, "callspec", None), "params", {}).get("model")
            if item.path.name == _CORPUS_MODULE and isinstance(model, str):
                # the first test of a corpus model in a process builds and captures it
                builds[item.nodeid] = (model, _BUILD_SECONDS if model.startswith("hf_") else 0.2)
    # one round of the properties whose rounds take longest (torch, serial, the
    # VM above; their round_s marks): a first round starts only if this much,
    # scaled by the load, is left
    rounds = {item.nodeid: cost_of(item).get("round_s", FIRST_ROUND_S) for item in items if is_budgeted(item)}
    # collecting took this many wall seconds per CPU second of this process:
    # how much the cores are shared, by the other workers and anything else
    import time

    cpu = time.process_time() - session.started_cpu
    contention = (time.time() - session.started) / cpu if cpu > 0.5 else 1.0
    session.slicer = Slicer(session.plan, {nodeid: i for i, nodeid in enumerate(budgeted)}, fixed,
                            builds=builds, rounds=rounds, contention=contention, floors=floors)


def _deal_floors(items, floors: int, workers: int) -> None:
    """The first ``floors`` items (the features' floors) dealt over the
    chunks xdist's load scheduling first hands the workers (consecutive
    items, a quarter of each worker's share): every worker starts with its
    part of them, instead of one worker running them all in turn."""
    chunk = xdist_first_chunk(len(items), workers, None)
    if workers < 2 or floors < 2 or chunk < 2:
        return
    head, rest = items[:floors], items[floors:]
    dealt = []
    for worker in range(workers):
        mine = head[worker::workers]
        taken = max(0, chunk - len(mine))
        dealt += mine + rest[:taken]
        rest = rest[taken:]
    items[:] = dealt + rest


#: What a fixed suite test (one that cannot be cut short) costs on one free
#: core, for a time budget to count it before starting it: the mean of its
#: cost class, measured serially on a quiet 2-core VM (torch 2.13 CPU,
#: 2026-11-25; single call 0.045 s over 98 tests, large inputs 0.66 s over
#: 23 of which the four 100,000-module trees take 2.3-2.9 s, corpus 0.34 s
#: over 30), and the distributed checks one by one (their
#: ranks, spawned, importing torch and compiling with Inductor; the first
#: run on a machine compiles cold, about 2x).
_CLASS_SECONDS = {"single call": 0.05, "large inputs": 0.35, "corpus": 0.35, "compile": 0.5, "processes": 10.0}


#: building and capturing one of the corpus's real architectures (hf_*),
#: paid by the first test of the model in a process: 1.2-3.3 s, serial
_BUILD_SECONDS = 2.5


def fixed_cost_s(item) -> float:
    if "100000" in item.nodeid:  # the 100,000-module trees: 2.3-2.9 s each, the rest of their class 0.1-1 s
        return 3.0
    return cost_of(item).get("seconds") or _CLASS_SECONDS[COST_CLASSES[cost_class(item)]]


def _with_saved_failures(session, items) -> set[str]:
    """Node ids of properties the example database holds an example for
    (dev/fuzz: a failure found before, replayed first by Hypothesis too)."""
    if session.plan is None or session.under_hypofuzz:
        return set()
    from hypothesis.internal.reflection import function_digest

    from ..core import profiles
    from .fuzz import database_key

    database = profiles.current().database
    found = set()
    for item in items:
        inner = getattr(getattr(getattr(item, "obj", None), "hypothesis", None), "inner_test", None)
        if database is None or inner is None:
            continue
        previous = getattr(inner, "_hypothesis_internal_add_digest", None)
        inner._hypothesis_internal_add_digest = database_key(item)
        try:
            if next(iter(database.fetch(function_digest(inner))), None) is not None:
                found.add(item.nodeid)
        except Exception:  # noqa: BLE001 - an unreachable database only loses the head start
            pass
        finally:
            if previous is None:
                del inner._hypothesis_internal_add_digest
            else:
                inner._hypothesis_internal_add_digest = previous
    return found


def group_by_corpus_model(items) -> None:
    """The corpus tests of one model and one cost class (and provided or
    not) made adjacent, in place, every other item left where it is. A worker builds and captures
    each model it meets once (functools.cache), and xdist hands out
    consecutive items in chunks, so grouped, a model is mostly captured by
    one worker instead of by each; the cheap goldens stay ahead of the
    captures."""
    by_class: dict[tuple, list[int]] = {}
    for i, item in enumerate(items):
        if (getattr(item, "path", None) is not None and item.path.name == _CORPUS_MODULE and is_suite_test(item)
                and "model" in getattr(getattr(item, "callspec", None), "params", {})):
            not_provided = PROP_NOT_PROVIDED in dict(getattr(item, "user_properties", ()))
            by_class.setdefault((cost_class(item), not_provided), []).append(i)
    for slots in by_class.values():
        first_seen: dict[str, int] = {}
        for i in slots:
            first_seen.setdefault(items[i].callspec.params["model"], i)
        grouped = sorted((items[i] for i in slots), key=lambda item: first_seen[item.callspec.params["model"]])
        for i, item in zip(slots, grouped, strict=True):
            items[i] = item


def xdist_first_chunk(total: int, workers: int, maxschedchunk: int | None) -> int:
    """How many consecutive items pytest-xdist's load scheduling
    (``--dist load``, the default of ``-n``) hands each worker to start with."""
    if total < 2 * workers:
        return 1  # it deals them one by one already
    return max(2, min(total // workers // 4, total if maxschedchunk is None else maxschedchunk))


def deal_first_chunks(items, workers: int, chunk: int) -> None:
    """Under ``--dist load`` each worker starts with ``chunk`` consecutive
    items, then takes more as it goes: in cheapest-first order the first
    worker would get every cheap check and the others what follows (for an
    implementation of one area: only the other areas' n/p skips), so under
    -x the run would wait for one worker to get through them alone. The
    first ``workers * chunk`` suite items are dealt instead, worker k's
    first chunk taking every ``workers``-th of them; a corpus model's
    adjacent tests are dealt as one (one worker builds it). In place;
    other items keep their slots."""
    if workers < 2 or chunk < 2:
        return
    slots = [i for i, item in enumerate(items) if is_suite_item(item)][: workers * chunk]
    units: list[list] = []
    for i in slots:
        model = _corpus_model(items[i])
        if model is not None and units and _corpus_model(units[-1][-1]) == model:
            units[-1].append(items[i])
        else:
            units.append([items[i]])
    hands: list[list] = [[] for _ in range(workers)]
    for unit in units:
        min(hands, key=len).extend(unit)
    for i, item in zip(slots, [item for hand in hands for item in hand], strict=True):
        items[i] = item


def _corpus_model(item):
    model = getattr(getattr(item, "callspec", None), "params", {}).get("model")
    return model if item.path.name == _CORPUS_MODULE and isinstance(model, str) else None


def tags_from_nodeid(session, nodeid: str):
    """(implementation, invariant IDs) of a suite test, from its id alone
    (the xdist controller collects nothing)."""
    path, _, name = nodeid.partition("::")
    function, _, params = name.partition("[")
    module = os.path.basename(path)[:-3] if path.endswith(".py") else ""
    try:
        fn = getattr(importlib.import_module(f"pytest_fsdpcheck.conformance.{module}"), function)
    except (ImportError, AttributeError):
        return None
    invariants = [i for mark in getattr(fn, "pytestmark", []) if mark.name == "invariant" for i in mark.args]
    params = params.rstrip("]")
    impl = next((s for s in session.impls if params == s or params.startswith(s + "-")), None)
    return (impl, invariants) if impl and invariants else None
