"""Users' own models and plans: every area that applies, on each model
named with ``--fsdpcheck-model`` (the plugin parametrizes
``fsdpcheck_model_case`` with those names). The same checks as
:func:`pytest_fsdpcheck.cases.parametrize_with_checks`; a factory with
declared strategies is drawn and shrunk."""

import pytest

from pytest_fsdpcheck.cases import checks

#: a user's model is built and captured once a process, like the corpus's
pytestmark = pytest.mark.fsdpcheck_cost("corpus")


@pytest.fixture
def fsdpcheck_model_case():
    """Replaced by the plugin's parametrization over ``--fsdpcheck-model``;
    without any model named, these checks have no input."""
    pytest.skip("no model named: give --fsdpcheck-model pkg.module:factory")


def _run(name, case, impl):
    checks.run_check(checks.CHECKS[name][0], case, impl)


@pytest.fixture
def fsdpcheck_case_built(fsdpcheck_run, fsdpcheck_model_case):
    """The case built and probed once, before any implementation runs: the
    user's mistake (a plan that raises, a model on the meta device, inputs
    that do not fit, an output that is not tensors) is this setup's one-line
    error, and every check of the case is n/p instead of a FAIL in an
    implementation's column."""
    from pytest_fsdpcheck.cases import CaseError

    try:
        checks.run_check(checks.check_case, fsdpcheck_model_case)
        error = None
    except CaseError as exc:
        error = str(exc)
    if error is not None:  # outside the except: no chained traceback under the one line
        fsdpcheck_run.case_error(fsdpcheck_model_case, error)
    return fsdpcheck_model_case


def test_model_case(fsdpcheck_case_built):
    """No implementation is judged here: the case is the user's, its plan's
    rules (PLN-1..5) included."""


@pytest.mark.invariant(*checks.CHECKS["check_fsdp2_walk"][1])
def test_model_fsdp2_walk(fsdpcheck_impl, fsdpcheck_model_case):
    _run("check_fsdp2_walk", fsdpcheck_model_case, fsdpcheck_impl)


@pytest.mark.invariant(*checks.CHECKS["check_fsdp2_recorded"][1])
def test_model_fsdp2_recorded(fsdpcheck_impl, fsdpcheck_model_case):
    _run("check_fsdp2_recorded", fsdpcheck_model_case, fsdpcheck_impl)


@pytest.mark.invariant(*checks.CHECKS["check_fully_shard_calls"][1])
def test_model_fully_shard_calls(fsdpcheck_impl, fsdpcheck_model_case):
    _run("check_fully_shard_calls", fsdpcheck_model_case, fsdpcheck_impl)


@pytest.mark.fsdpcheck_cost("compile")
@pytest.mark.invariant(*checks.CHECKS["check_buckets"][1])
def test_model_buckets(fsdpcheck_impl, fsdpcheck_model_case):
    _run("check_buckets", fsdpcheck_model_case, fsdpcheck_impl)


@pytest.mark.fsdpcheck_cost("compile")
@pytest.mark.invariant(*checks.CHECKS["check_bucket_assignment"][1])
def test_model_bucket_assignment(fsdpcheck_impl, fsdpcheck_model_case):
    _run("check_bucket_assignment", fsdpcheck_model_case, fsdpcheck_impl)


@pytest.mark.invariant(*checks.CHECKS["check_traversal"][1])
def test_model_traversal(fsdpcheck_impl, fsdpcheck_model_case):
    _run("check_traversal", fsdpcheck_model_case, fsdpcheck_impl)


@pytest.mark.invariant(*checks.CHECKS["check_annotation"][1])
def test_model_annotation(fsdpcheck_impl, fsdpcheck_model_case):
    _run("check_annotation", fsdpcheck_model_case, fsdpcheck_impl)


@pytest.mark.invariant(*checks.CHECKS["check_annotation_ignored"][1])
def test_model_annotation_ignored(fsdpcheck_impl, fsdpcheck_model_case):
    _run("check_annotation_ignored", fsdpcheck_model_case, fsdpcheck_impl)


@pytest.mark.invariant(*checks.CHECKS["check_exec_order"][1])
def test_model_exec_order(fsdpcheck_impl, fsdpcheck_model_case):
    _run("check_exec_order", fsdpcheck_model_case, fsdpcheck_impl)


@pytest.mark.fsdpcheck_cost("processes")
@pytest.mark.invariant(*checks.CHECKS["check_plan_end_to_end"][1])
def test_model_plan_end_to_end(fsdpcheck_impl, fsdpcheck_model_case, fsdpcheck_run):
    import functools

    from pytest_fsdpcheck.cases import CaseError
    from pytest_fsdpcheck.checks import EnvironmentFault

    # CPU ranks under gloo: the plan runs on the runner's CPU world size
    check = functools.partial(checks.CHECKS["check_plan_end_to_end"][0], world_size=fsdpcheck_run.world_size("cpu"),
                              timeout_s=fsdpcheck_run.timeout_s)
    error = None
    try:
        # each example is a world of its own: drawn within --fsdpcheck-plan-examples, never shrunk
        checks.run_check(check, fsdpcheck_model_case, fsdpcheck_impl, max_examples=fsdpcheck_run.plan_examples, shrink=False)
    except EnvironmentFault as exc:
        # a world too slow to judge the plan: ERROR, never the implementation's FAIL
        fsdpcheck_run.mark_environment(str(exc))
        raise
    except CaseError as exc:
        # the plan's step fails in the unsharded control too: the user's
        # mistake, one case-error line, no implementation's cell
        error = str(exc)
    if error is not None:  # outside the except: no chained traceback under the one line
        fsdpcheck_run.case_error(fsdpcheck_model_case, error)


@pytest.mark.invariant(*checks.CHECKS["check_plan_simulated"][1])
def test_model_plan_simulated(fsdpcheck_impl, fsdpcheck_model_case, fsdpcheck_run):
    import functools

    # the plan at the size it trains at: --fsdpcheck-world-size, simulated (FS2-10), never capped
    check = functools.partial(checks.CHECKS["check_plan_simulated"][0], world_size=fsdpcheck_run.simulated_world_size)
    checks.run_check(check, fsdpcheck_model_case, fsdpcheck_impl)
