"""The pytest plugin: ``pytest --fsdpcheck`` runs the conformance suite.

Hooks only, in the order pytest calls them; each hands over to the module
that owns its concern, in this folder: :mod:`.options` (flags, ini names, validation),
:mod:`.session` (what the run checks), :mod:`.collection` (which suite items,
parametrized how, in which order), :mod:`.verdicts` (from an outcome to
pass / FAIL / known / declared / n/p) and :mod:`.report` (header, matrix,
JSON). Without ``--fsdpcheck`` (or ``fsdpcheck = true`` in the ini file)
every hook returns at once: no torch import, no file written, nothing
collected.
"""

from __future__ import annotations

import os
import time

import pytest

from . import collection, options, verdicts
from .session import get_session, leave_run


def pytest_addoption(parser):
    options.add_options(parser)


def pytest_configure(config):
    config.addinivalue_line("markers", "invariant(*ids): the pytest-fsdpcheck invariant IDs a test checks")
    config.addinivalue_line("markers", "fsdpcheck_cost(cost_class, slow=, seconds=, round_s=): what a pytest-fsdpcheck "
                                       "suite test costs (its order and its time budget)")
    if not options.enabled(config):
        options.warn_if_given_while_disabled(config)
        return
    from . import session

    collection.add_suite_paths(config)
    try:
        session.start(config, options.read_settings(config))
    except pytest.UsageError as exc:
        if not hasattr(config, "workerinput"):
            raise
        # xdist prints a worker's usage error as its traceback, and goes on;
        # a failed collection is printed once, as the line it carries
        config.pluginmanager.register(WorkerLoadError(str(exc)), "fsdpcheck-load-error")
        return
    from . import fixtures

    config.pluginmanager.register(fixtures, "fsdpcheck-fixtures")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(config), "fsdpcheck-xdist")
        get_session(config).run.stop_path = getattr(config, "workerinput", {}).get("fsdpcheck_stop")
        get_session(config).run.worlds_dir = getattr(config, "workerinput", {}).get("fsdpcheck_worlds")
    if config.pluginmanager.hasplugin("html"):
        config.pluginmanager.register(HtmlHooks(), "fsdpcheck-html")


def pytest_report_header(config):
    state = get_session(config)
    if state is not None:
        from ..report.terminal import header_lines

        return header_lines(state)
    return None


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    state = get_session(session.config)
    if state is not None:
        from .verdicts import MatrixRecorder

        state.pytest_session = session
        if not hasattr(session.config, "workerinput"):
            from ..report.terminal import start_report

            start_report(state)
        session.config.pluginmanager.register(MatrixRecorder(state), "fsdpcheck-matrix")
        session.config.pluginmanager.register(verdicts.CaseInputRecorder(state), "fsdpcheck-case-inputs")


def pytest_ignore_collect(collection_path, config):
    return True if collection.ignore(collection_path, get_session(config)) else None


def pytest_generate_tests(metafunc):
    collection.parametrize(metafunc, get_session(metafunc.config))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    # tryfirst: before -k/-m deselect anything, so an entry whose test exists
    # but was not selected is not called stale.
    state = get_session(config)
    if state is not None:
        collection.tag(state, items)
        collection.select_node_ids(config, items)
        collection.order(state, items)


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_dealt(session, config, items):
    # trylast: after -k/-m/--deselect, on the items xdist will schedule
    deal = getattr(config, "workerinput", {}).get("fsdpcheck_deal")
    if deal is not None and get_session(config) is not None:
        workers, maxschedchunk = deal
        collection.deal_first_chunks(items, workers, collection.xdist_first_chunk(len(items), workers, maxschedchunk))


@pytest.hookimpl(trylast=True)
def pytest_deselected(items):
    state = get_session(items[0].config) if items else None
    if state is not None:
        collection.record_deselected(state, items)


def pytest_collection_finish(session):
    state = get_session(session.config)
    if state is not None:
        collection.share_budget(state, session.items)
        if state.slicer is not None:
            # what the first test would import, imported while starting up:
            # a time budget's clock starts with the first test
            verdicts.warm_up()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # Under a time budget a worker's last item runs to the deadline. xdist
    # holds a worker's last item back until it has more or shuts down, so
    # ``nextitem is None`` means nothing else will come to this worker.
    if nextitem is None and collection.is_suite_test(item):
        item._fsdpcheck_last_here = True
    state = get_session(item.config)
    slicer = state.slicer if state is not None else None
    started = time.time()
    try:
        return (yield)
    finally:
        if slicer is not None and not getattr(item, "_fsdpcheck_budget_skip", False):
            slicer.fixed_done(item.nodeid, time.time() - started)
        if state is not None and hasattr(item.config, "workerinput"):
            from .fuzz import STOP_REASON, stop_requested

            if stop_requested():
                item.session.shouldstop = STOP_REASON  # xdist's worker loop ends after this test


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # Under a time budget a suite test starts only if it fits in what is left.
    state = get_session(item.config)
    if state is None or state.slicer is None or not collection.is_suite_item(item):
        return
    reason = state.slicer.admit(item.nodeid)
    if reason is not None:
        item._fsdpcheck_budget_skip = True
        collection.record_deselected(state, [item])  # nothing is concluded from a test not run
        pytest.skip(reason)


@pytest.hookimpl(wrapper=True, specname="pytest_runtest_setup")
def pytest_runtest_setup_watched(item):
    # a corpus model is built in its test's setup: seconds the stop need not wait for
    state = get_session(item.config)
    if state is None or not collection.is_suite_item(item):
        return (yield)
    from . import fuzz

    with fuzz.stop_watch():
        if state.run.stop_path is not None:
            # what a worker's first call imports before the test's body
            # (Dynamo: 2 s on the shared 2-core box), imported where the stop can end it
            verdicts.warm_up()
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    state = get_session(item.config)
    if state is None or not collection.is_suite_item(item):
        return (yield)
    from .fuzz import stop_watch

    with verdicts.observed_call(item, state), stop_watch():
        return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_runtest_call")
def pytest_runtest_call_settings(item):
    # the session's own Hypothesis settings on the property, for its call;
    # tryfirst: outside Hypothesis' wrapper, which adds to them in place
    if get_session(item.config) is None or not collection.is_suite_item(item):
        return (yield)
    from ..core.profiles import session_settings

    with session_settings(item.obj):
        return (yield)


@pytest.hookimpl(wrapper=True, specname="pytest_pyfunc_call")
def pytest_pyfunc_call_body(pyfuncitem):
    # the body alone: other plugins reseed the global generators in the
    # call phase's hooks around it
    state = get_session(pyfuncitem.config)
    if state is None or not collection.is_suite_item(pyfuncitem):
        return (yield)
    with verdicts.observed_body(pyfuncitem):
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    state = get_session(pyfuncitem.config)
    if (state is None or state.plan is None or state.under_hypofuzz or not collection.is_suite_item(pyfuncitem)
            or not getattr(pyfuncitem.obj, "is_hypothesis_test", False)):
        return None
    from .fuzz import run_property

    run_property(pyfuncitem, state.plan, state.slicer)
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    state = get_session(item.config)
    suite_item = state is not None and collection.is_suite_item(item)
    failure = verdicts.prepare_failure(item, call) if suite_item else None
    report = yield
    if suite_item:
        verdicts.judge_report(item, call, report, state, failure)
    return report


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = get_session(config)
    if state is not None and not hasattr(config, "workerinput"):
        from ..report.terminal import terminal_summary
        from ..report.verdict import EXIT_ENVIRONMENT, EXIT_MEANING

        # pytest prints the summary inside sessionfinish and exits with the
        # session's status as it stands after it
        written = terminal_summary(terminalreporter, state, verdicts.findings(state), verdicts.exposures(state))
        pytest_session = state.pytest_session
        if pytest_session is None:
            return
        if not written:  # the report asked for could not be written (a full disk): the machine's
            pytest_session.exitstatus = verdicts.worse_status(pytest_session.exitstatus, EXIT_ENVIRONMENT)
        meaning = EXIT_MEANING.get(pytest_session.exitstatus)
        if meaning is not None:
            terminalreporter.write_line(f"fsdpcheck: exit status {int(pytest_session.exitstatus)}: {meaning}",
                                        red=True)


def pytest_unconfigure(config):
    leave_run(config)  # the state of a session that started this one is current again
    state = get_session(config)
    clock = state.plan.clock_path if state is not None and state.plan is not None else None
    if clock is not None and not hasattr(config, "workerinput"):
        import shutil

        shutil.rmtree(os.path.dirname(clock), ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    state = get_session(session.config)
    if state is None:
        return
    if hasattr(session.config, "workerinput"):
        session.config.workeroutput["fsdpcheck_matched"] = [
            i for i, e in enumerate(state.divergences) if e in state.matched_entries]
        session.config.workeroutput["fsdpcheck_deselected"] = sorted(state.deselected)
        session.config.workeroutput["fsdpcheck_loaded"] = state.loaded()
        return
    if state.worker_load_error:
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    verdicts.finish(state, session, exitstatus)


class WorkerLoadError:
    """Registered on an xdist worker whose session could not start (an
    implementation or model that does not load where the controller, which
    imports neither, could not tell): its collection fails with the reason,
    and the controller ends the run as a usage error."""

    PREFIX = "fsdpcheck: "

    def __init__(self, message: str):
        self.message = message if message.startswith(self.PREFIX) else self.PREFIX + message

    @pytest.hookimpl(tryfirst=True)
    def pytest_make_collect_report(self, collector):
        if isinstance(collector, pytest.Session):
            return pytest.CollectReport(collector.nodeid, "failed", self.message, [])
        return None


class XdistHooks:
    """Registered only when pytest-xdist is present."""

    def __init__(self, config):
        self.config = config
        self.maxfail = config.getoption("maxfail", 0) or 0
        self.stop_path = None  # the controller's -x/--maxfail stop file (RunState.stop_path on workers)
        self.worlds_dir = None  # the controller's folder of the ranks' results (RunState.worlds_dir on workers)
        self.failures = 0

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        state = get_session(node.config)
        if state is not None and state.seed is not None:
            node.workerinput["fsdpcheck_seed"] = state.seed
        plan = state.plan if state is not None else None
        if plan is not None and plan.budget_s is not None:
            if plan.clock_path is None:
                import tempfile

                plan.clock_path = os.path.join(tempfile.mkdtemp(prefix="fsdpcheck-clock-"), "started")
            node.workerinput["fsdpcheck_clock"] = plan.clock_path
        if node.config.getoption("dist", "no") == "load":
            # the workers deal their first chunks (collection.deal_first_chunks); only they collect
            node.workerinput["fsdpcheck_deal"] = [node.workerinput.get("workercount", 1),
                                                  node.config.getoption("maxschedchunk", None)]
        if state is not None:
            # one run of each world for the whole session, whichever worker asks first
            if self.worlds_dir is None:
                import tempfile

                self.worlds_dir = tempfile.mkdtemp(prefix="fsdpcheck-worlds-")
            node.workerinput["fsdpcheck_worlds"] = self.worlds_dir
        if self.maxfail:
            if self.stop_path is None:
                import tempfile

                self.stop_path = os.path.join(tempfile.mkdtemp(prefix="fsdpcheck-stop-"), "stop")
            node.workerinput["fsdpcheck_stop"] = self.stop_path

    def pytest_runtest_logreport(self, report):
        # the controller: at the failure that reaches -x/--maxfail, every
        # worker stops after its current test, not after its whole share
        if self.stop_path is None or not report.failed:
            return
        self.failures += 1
        if self.failures >= self.maxfail:
            from .fuzz import request_stop

            request_stop(self.stop_path)

    def pytest_unconfigure(self, config):
        import shutil

        if self.stop_path is not None:
            shutil.rmtree(os.path.dirname(self.stop_path), ignore_errors=True)
        if self.worlds_dir is not None:
            shutil.rmtree(self.worlds_dir, ignore_errors=True)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem, report, sched):
        # A worker died inside a test: its report carries no properties, so
        # the matrix would show nothing. Charge the crash to the test's cells.
        state = get_session(sched.config)
        tagged = collection.tags_from_nodeid(state, crashitem) if state is not None else None
        if tagged is not None:
            from ..report.verdict import PROP_IMPL, PROP_INVARIANTS

            impl, invariants = tagged
            report.user_properties = [*report.user_properties, (PROP_INVARIANTS, invariants), (PROP_IMPL, impl)]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        # Only workers collect; they report which divergence entries matched
        # and which tests -k or node ids deselected.
        state = get_session(node.config)
        if state is not None:
            output = getattr(node, "workeroutput", {})
            for index in output.get("fsdpcheck_matched", ()):
                state.matched_entries.add(state.divergences[index])
            state.deselected.update(tuple(pair) for pair in output.get("fsdpcheck_deselected", ()))
            state.learn(output.get("fsdpcheck_loaded"))

    def pytest_collectreport(self, report):
        # the controller: a worker that could not start its session failed
        # its collection with the one-line reason (WorkerLoadError)
        state = get_session(self.config)
        if state is not None and report.failed and str(report.longrepr).startswith(WorkerLoadError.PREFIX):
            state.worker_load_error = str(report.longrepr)


class HtmlHooks:
    """Registered only when pytest-html is present: the suite's sections
    (matrix, failures with their reproducers, known bugs, n/p reasons,
    exposure) in its report's summary."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix, summary, postfix, session):
        state = get_session(session.config)
        if state is None:
            return
        # pytest-html writes its page in its own sessionfinish, which runs
        # before this plugin's: the run's verdicts are drawn here first
        # (drawing them again there gives the same)
        verdicts.finish(state, session, session.exitstatus)
        from ..report.terminal import html_sections

        summary.extend(html_sections(state, verdicts.findings(state), verdicts.exposures(state)))
