"""The containment of one implementation call, in-process: what it stops,
what it puts back, and what it must leave alone (a forked child's exit, an
implementation that saves and restores a generator itself)."""

import multiprocessing
import os
import random

import pytest
import torch

from pytest_fsdpcheck.plugin.guard import Guarded, ImplementationExit, LeakedGlobalState

pytestmark = pytest.mark.unit


class _Traversal:
    def __init__(self, body):
        self.body = body

    def states_with_modules(self, root):
        self.result = self.body()
        return [], []


def _guarded(body):
    class Impl:
        traversal = _Traversal(body)

    return Guarded(Impl(), "planted", timeout=0).traversal


def _result(body):
    traversal = _Traversal(body)

    class Impl:
        pass

    Impl.traversal = traversal
    Guarded(Impl(), "planted", timeout=0).traversal.states_with_modules(None)
    return traversal.result


def test_os_exit_fails_the_call_and_is_put_back():
    real = os._exit
    with pytest.raises(ImplementationExit, match=r"planted: traversal.states_with_modules tried to exit the process with status 3"):
        _guarded(lambda: os._exit(3)).states_with_modules(None)
    assert os._exit is real


def test_exit_caught_by_the_implementation_still_fails_the_call():
    def swallows():
        try:
            os._exit(0)
        except Exception:  # noqa: BLE001 - what a careless implementation does
            pass

    with pytest.raises(ImplementationExit, match="went on after it was stopped"):
        _guarded(swallows).states_with_modules(None)


def _child_work(queue):
    queue.put(os.getpid())


def test_a_forked_child_still_exits():
    # multiprocessing's fork start method ends each child with os._exit: a
    # child that raised instead would go on to run the rest of the session.
    context = multiprocessing.get_context("fork")

    def spawn():
        queue = context.Queue()
        process = context.Process(target=_child_work, args=(queue,))
        process.start()
        pid = queue.get(timeout=30)
        process.join(30)
        return pid, process.exitcode

    pid, code = _result(spawn)
    assert pid != os.getpid() and code == 0


def test_a_generator_saved_and_put_back_is_no_leak():
    def careful():
        state = random.getstate()
        random.seed(5)
        random.random()
        random.setstate(state)
        with torch.random.fork_rng():
            torch.manual_seed(5)

    before = random.getstate(), torch.initial_seed()
    _guarded(careful).states_with_modules(None)
    assert (random.getstate(), torch.initial_seed()) == before


def test_drawing_from_torch_is_no_leak():
    # parameter initialisation and dropout draw from torch's generator
    _guarded(lambda: torch.randn(3)).states_with_modules(None)


def test_reseeding_is_undone_and_fails_the_call():
    before = random.getstate(), torch.initial_seed(), torch.get_rng_state()

    def reseeds():
        random.seed(99)
        torch.manual_seed(before[1] + 1)

    with pytest.raises(LeakedGlobalState, match=r"random \(reseeded\); torch random seed"):
        _guarded(reseeds).states_with_modules(None)
    assert random.getstate() == before[0] and torch.initial_seed() == before[1]
    assert torch.equal(torch.get_rng_state(), before[2])


def test_a_leak_fails_a_passing_known_or_skipped_test_and_is_named_on_a_failing_one():
    """A leak must not hide behind the test's own outcome: a pass, a known
    bug and a skip (n/p: the leak may be what made the check unable to run)
    become a FAIL naming the test's invariants; a failure stays its own,
    with the leak added to what it says."""
    from types import SimpleNamespace

    from pytest_fsdpcheck.plugin import verdicts
    from pytest_fsdpcheck.report.verdict import PROP_IMPL, PROP_INVARIANTS

    item = SimpleNamespace(user_properties=[(PROP_INVARIANTS, ("ANN-7",)), (PROP_IMPL, "planted")])
    leak = ["dynamo.config (disable)"]
    wanted = r"^ANN-7: planted left process-wide state changed: dynamo.config \(disable\) \(restored"
    for outcome in (None, pytest.skip.Exception("not provided: no graph"), pytest.xfail.Exception("known: bug")):
        with pytest.raises(LeakedGlobalState, match=wanted):
            verdicts._charge_leak(item, leak, outcome, outcome is not None)
    failure = AssertionError("ANN-7: mlp: compiled output differs from eager")
    verdicts._charge_leak(item, leak, failure, True)
    assert [note.startswith("LeakedGlobalState: ANN-7: planted left process-wide state changed: dynamo.config")
            for note in failure.__notes__] == [True]


# --- a run of calls contained as one (generators.trees.attach_states) ---------


class _Attaching:
    """new_state/attach_state with a body run on every call to attach_state."""

    def __init__(self, body):
        from pytest_fsdpcheck.reference.traversal import ReferenceTraversal

        self._reference, self.body, self.calls = ReferenceTraversal(), body, 0

    def new_state(self, handle, is_root):
        return self._reference.new_state(handle, is_root)

    def attach_state(self, module, state):
        self.calls += 1
        self.body(self.calls)
        return self._reference.attach_state(module, state)


def _build_chain(body, timeout, depth=12):
    from pytest_fsdpcheck.generators.trees import build_tree, deep_chain

    class Impl:
        traversal = _Attaching(body)

    guarded = Guarded(Impl(), "planted", timeout=timeout)
    return guarded, lambda: build_tree(deep_chain(depth, state_every=1), guarded.traversal)


def test_a_tree_built_of_slow_calls_each_within_the_limit_passes():
    """One limit per call, not per tree: 12 calls of 40 ms under a 0.25 s
    limit take twice the limit in all and every one of them is in time."""
    import time

    guarded, build = _build_chain(lambda n: time.sleep(0.04), timeout=0.25)
    tree = build()
    assert len(tree.states) == 12 and guarded.hung is None and guarded.span is None


def test_a_call_that_hangs_while_a_tree_is_built_fails_naming_it():
    import signal
    import time

    from pytest_fsdpcheck.plugin.guard import ImplementationTimeout

    def hangs_at_the_fifth(n):
        while n == 5:
            pass

    guarded, build = _build_chain(hangs_at_the_fifth, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(ImplementationTimeout, match=r"^planted: traversal.attach_state did not return within 0.3 s"):
        build()
    assert time.monotonic() - started < 10
    assert guarded.hung and guarded.span is None
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # nothing left armed
    with pytest.raises(ImplementationTimeout, match="an earlier call hung; not called again"):
        build()


def test_a_call_that_reseeds_or_exits_while_a_tree_is_built_fails_naming_the_build():
    before = random.getstate()

    def reseeds_at_the_third(n):
        if n == 3:
            random.seed(7)

    _, build = _build_chain(reseeds_at_the_third, timeout=5)
    with pytest.raises(LeakedGlobalState, match=r"^planted: traversal \(building a 12-module tree\) left process-wide "
                                                r"state changed: random \(reseeded\)"):
        build()
    assert random.getstate() == before
    real = os._exit
    _, build = _build_chain(lambda n: n == 2 and os._exit(4), timeout=5)
    with pytest.raises(ImplementationExit, match=r"^planted: traversal \(building a 12-module tree\) tried to exit "
                                                 r"the process with status 4"):
        build()
    assert os._exit is real


def test_a_limit_below_the_watchdogs_own_cost_fails_the_first_call_in_one_line():
    """A limit shorter than the watchdog's handler (1e-7 s) used to ring
    again inside it, without end: a RecursionError, not a timeout."""
    import signal

    from pytest_fsdpcheck.plugin.guard import ImplementationTimeout

    handler, real = signal.getsignal(signal.SIGALRM), os._exit
    guarded, build = _build_chain(lambda n: None, timeout=1e-7)
    with pytest.raises(ImplementationTimeout, match=r"^planted: traversal\.new_state did not return within 1e-07 s"):
        build()
    assert guarded.span is None and os._exit is real
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) is handler
    with pytest.raises(ImplementationTimeout, match=r"^planted: traversal\.states_with_modules did not return within 1e-07 s"):
        Guarded(type("Impl", (), {"traversal": _Traversal(lambda: sum(range(10_000)))})(), "planted",
                timeout=1e-7).traversal.states_with_modules(None)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) is handler
