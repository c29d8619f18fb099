"""A user's mistake is the user's (issue 28 item 4): a plan or factory that
raises, a model on the meta device, example inputs that do not fit, an
output that is not floating-point tensors, a plan that calls nothing. Each
is found when the case is first built and reported once, in one line naming
the factory, as the case's error: every check of it is skipped, no
implementation's column shows a FAIL. A plan breaking PLN-1/PLN-2 is judged
by PLN only: FS2-9 is n/p with that reason."""

import pytest

pytestmark = pytest.mark.unit

pytest.importorskip("torch.distributed.fsdp")

from pytest_fsdpcheck.cases import CaseError, build_case, checks  # noqa: E402
from pytest_fsdpcheck.cases.inputs import recorded  # noqa: E402
from pytest_fsdpcheck.cases.probe import case_problem  # noqa: E402
from pytest_fsdpcheck.report.verdict import EXIT_CASE_ERROR  # noqa: E402
from tests.planted import mistakes, plans  # noqa: E402

REF = "tests.planted.mistakes"

MISTAKES = [
    ("plan_raises", "plan raised KeyError: 'x'"),
    ("plan_idle", "plan made no fully_shard call"),
    ("on_meta", "model is on the meta device (embed.weight has no data)"),
    ("inputs_misfit", "example inputs do not fit: RuntimeError: Expected tensor for argument #1 'indices'"),
    ("int_output", "forward returned a torch.int64 tensor, expected floating-point tensors"),
    ("python_int_output", "forward returned int, expected tensors"),
    # a call the spec rejects (FS2-4); it was FS2-7 FAIL for torch and the reference
    ("scalar_param", "plan's call 4 fully_shard(<root>) would shard the 0-dim parameter scale, which FSDP2 rejects"),
    # calls the installed fully_shard does not take (issue 38 item 6): they passed
    # test_model_case and every check but FS2-9, whose real step then failed
    ("mesh_positional", "plan's call fully_shard(layers.0) does not fit fully_shard(module, *, mesh"),
    ("reshard_yes", "plan's call fully_shard(layers.0) reshard_after_forward='yes': a bool, or a whole number of ranks"),
    ("container_group", "plan's call fully_shard(layers) layers is a ModuleList, a container without a forward"),
]


@pytest.mark.parametrize(("name", "cause"), MISTAKES)
def test_the_case_error_is_one_line_naming_the_factory(name, cause):
    case = build_case(getattr(mistakes, name))
    problem = case_problem(case)
    assert problem is not None and problem.startswith(f"model {REF}:{name}: {cause}"), problem
    assert "\n" not in problem and len(problem) < 300
    with pytest.raises(CaseError) as info:
        checks.check_case(case)
    assert str(info.value) == problem


@pytest.mark.parametrize(("name", "cause"), MISTAKES)
def test_no_check_is_charged_with_it(name, cause, monkeypatch):
    monkeypatch.setattr("pytest_fsdpcheck.runs.plan_world.run_plan_ranks", lambda *a, **k: pytest.fail("a rank started"))
    for check_name, (check, _) in checks.CHECKS.items():
        if check is checks.check_case:
            continue
        for impl in ("torch", "reference"):
            with pytest.raises(pytest.skip.Exception) as info:
                checks.run_check(check, f"{REF}:{name}", impl)
            assert cause in str(info.value) and "reported once by check_case" in str(info.value), check_name
            assert not str(info.value).startswith("not provided"), "skipped, not n/p: the case could not run"


def test_a_scalar_parameter_every_call_reaching_it_ignores_is_no_mistake():
    from torch.distributed.fsdp import fully_shard

    from pytest_fsdpcheck.cases import ModelCase

    def plan(model, mesh):  # FSDP2 accepts a scalar it is told to ignore
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard([model.embed, model.lm_head], mesh=mesh)
        fully_shard(model, mesh=mesh, ignored_params={model.scale})

    case = mistakes.scalar_param()
    case = ModelCase("scalar_ignored", case.model, case.example_inputs, plan=plan, unreduced=("scale",))
    assert case_problem(case) is None
    assert [c.error for c in recorded(case).calls] == [None] * 4


def test_a_raising_factory_is_named_by_its_module():
    with pytest.raises(CaseError, match=rf"^model factory {REF}:factory_raises\(\) raised KeyError: 'x'$"):
        build_case(mistakes.factory_raises)


def test_a_drawn_configuration_that_raises_is_the_cases_error_shrunk():
    with pytest.raises(CaseError, match=rf"^model {REF}:drawn_raises\(depth=2\): plan raised KeyError: 'x'$"):
        checks.run_check(checks.check_case, mistakes.drawn_raises)
    # the other checks judge the configurations that build (depth 1) and pass
    checks.run_check(checks.check_plan_rules, mistakes.drawn_raises)
    checks.run_check(checks.check_fsdp2_walk, mistakes.drawn_raises, "reference")


@pytest.mark.parametrize(("factory", "rule"), [(plans.tied_split, "PLN-1"), (plans.shared_module, "PLN-2"),
                                             (plans.adapters_after, "PLN-3"), (plans.ignored_trainable, "PLN-5")])
def test_a_plan_breaking_a_rule_is_the_users_before_any_rank_starts(factory, rule, monkeypatch):
    """Issue 56 finding 3: a plan's mistake was a FAIL cell in torch's
    column (exit 1, "page its owner"). It is the case's error: one line
    naming the factory and the rule, and no rank of FS2-9 starts on it."""
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    monkeypatch.setattr("pytest_fsdpcheck.runs.plan_world.run_plan_ranks", lambda *a, **k: pytest.fail("a rank started"))
    case = build_case(factory)
    problem = case_problem(case)
    assert problem is not None and problem.startswith(f"model tests.planted.plans:{factory.__name__}: {rule}: ")
    with pytest.raises(CaseError, match=rf"^model tests.planted.plans:{factory.__name__}: {rule}: "):
        checks.check_plan_end_to_end(case, "torch", world_size=2)


@pytest.mark.plugin
def test_a_run_reports_each_mistake_once_and_fails_no_cell(run_suite):
    models = ["plan_raises", "on_meta", "inputs_misfit", "int_output"]
    extra = [arg for name in models for arg in ("--fsdpcheck-model", f"{REF}:{name}")]
    result, report = run_suite("torch", "reference", k="test_model", extra=["-p", "no:randomly", *extra])
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == len(models) and not outcomes.get("failed"), outcomes
    text = "\n".join(result.outlines)
    # one error per case, each one line under its header: no traceback, no plugin source
    from tests.helpers import failure_sections

    sections = failure_sections(result.outlines)
    for name, cause in MISTAKES:
        if name not in models:
            continue
        header = f"ERROR at setup of test_model_case[{REF}.{name}]"
        assert sections[header].strip().startswith(f"model {REF}:{name}: {cause}"), sections[header]
        assert len(sections[header].strip().splitlines()) == 1
        assert report["case_errors"][f"{REF}:{name}"].startswith(f"model {REF}:{name}: {cause}")
    assert "Traceback" not in text and "def " not in text
    for impl, cells in report["matrix"].items():
        assert {cell["outcome"] for cell in cells.values()} == {"skipped"}, (impl, cells)
    errors = [t for t in report["tests"].values() if t["outcome"] == "error"]
    assert len(errors) == len(models) and all("case_error" in t for t in errors)
    assert "case error (yours, no implementation judged on it): model tests.planted.mistakes:plan_raises" in text
    assert result.ret == EXIT_CASE_ERROR, "the case errors' own exit status, not a FAIL's"
    assert "known-bug exposure of tests.planted.mistakes" not in text


# --- a step that fails the same way in the unsharded control (issue 38 item 6) -------

MIXED = "RuntimeError: mat1 and mat2 must have the same dtype, but got BFloat16 and Float"


def _records(control, step, ranks=(0, 1)):
    return [{"rank": r, "error": None, "control_error": control and f"{control}\nTraceback ...",
             "eager": {"error": step and f"{step}\nTraceback ...", "grads": {}}} for r in ranks]


def test_a_step_failing_as_its_control_does_is_the_users_mistake():
    from pytest_fsdpcheck.checks.plan_distributed import users_mistake

    mistake = users_mistake(_records(MIXED, MIXED))
    assert mistake.startswith("the plan's step fails in the unsharded model at the plan's own precision too") and MIXED in mistake
    assert "\n" not in mistake


def test_a_failure_the_model_wholly_in_the_plans_dtype_shares_is_torchs_not_the_users():
    """Issue 56 audit: torch's own bf16 operator raising (planted) made the
    control and the step fail alike on a sound bf16 plan, and FS2-9 called
    it the user's. A step the plan did not ask for tells them apart: the
    model cast wholly to the plan's dtype (nothing mixed) runs where the
    plan mixes precisions (the user's), and fails the same way where the
    operators fail on their own (torch's FS2-9, naming why)."""
    from pytest_fsdpcheck.checks.plan_distributed import check_plan_end_to_end, users_mistake

    mixing = _records(MIXED, MIXED)
    for record in mixing:
        record["uniform"] = {"dtype": "bfloat16", "error": None}
    assert users_mistake(mixing) is not None
    operators = _records(MIXED, MIXED)
    for record in operators:
        record["uniform"] = {"dtype": "bfloat16", "error": f"{MIXED}\nTraceback ..."}
    assert users_mistake(operators) is None
    [v] = check_plan_end_to_end(operators)
    assert v.invariant == "FS2-9" and v.message == (
        f"ranks 0, 1: the unsharded control at the plan's precision failed: {MIXED}, where the unsharded model "
        "cast wholly to bfloat16 (no dtypes mixed, no fully_shard) fails the same way: torch's operators fail at "
        "the plan's precision on their own"), v.message


def test_a_control_failing_where_the_step_does_otherwise_or_runs_is_still_judged():
    """The control's failure alone decides nothing: where the plan's step
    ran, or failed with another error, or one rank's control ran, the
    records are the implementation's to judge (FS2-9 FAIL), one line for
    the ranks alike."""
    from pytest_fsdpcheck.checks.plan_distributed import check_plan_end_to_end, users_mistake

    other = "RuntimeError: the reduce-scatter lost a shard"
    assert users_mistake(_records(MIXED, other)) is None
    assert users_mistake(_records(MIXED, None)) is None
    assert users_mistake(_records(None, MIXED)) is None
    one_rank = _records(MIXED, MIXED)
    one_rank[1]["control_error"] = None
    assert users_mistake(one_rank) is None
    assert [(v.invariant, v.message) for v in check_plan_end_to_end(_records(MIXED, other))] == [(
        "FS2-9", f"ranks 0, 1: the unsharded control at the plan's precision failed: {MIXED}, where the plan's "
                 f"eager step failed otherwise: {other}")]
    ran, = check_plan_end_to_end(_records(MIXED, None))
    assert ran.message.endswith("where the plan's eager step ran") and ran.message.startswith("ranks 0, 1: ")


def test_a_plan_whose_step_fails_in_the_control_too_is_one_case_error_line(run_suite, monkeypatch):
    """A frozen module in ``ignored_params`` under bf16 (real torch fails
    the step, a true finding about the plan): one case-error line naming
    the factory and what failed, never ``FS2-9 FAIL [torch]`` per rank."""
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    spec = f"{REF}:frozen_ignored_bf16"
    result, report = run_suite("torch", k="test_model_case or test_model_plan_end_to_end",
                               extra=["--fsdpcheck-model", spec])
    error = report["case_errors"].get(spec, "")
    assert error.startswith(f"model {spec}: FS2-9: the plan's step fails in the unsharded model at the plan's "
                            "own precision too") and MIXED in error, (error, result.outlines[-30:])
    assert "FS2-9" not in report["matrix"].get("torch", {}), report["matrix"].get("torch")
    text = result.stdout.str()
    assert "FS2-9: rank" not in text and "Traceback" not in text, text[-3000:]
    assert text.count(f"case error (yours, no implementation judged on it): model {spec}: FS2-9: ") == 1
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("failed") == 1, outcomes
    assert result.ret == EXIT_CASE_ERROR, "\n".join(result.outlines[-20:])


def test_a_routed_plan_breaking_fsdp2s_per_rank_step_is_one_case_error_line_naming_what(run_suite, monkeypatch):
    """Issue 57, each rank its own data: a routed model whose ranks reach
    different experts. Leaving set_reduce_scatter_unused_params off, or
    making each expert a group some rank never calls, breaks what FSDP2
    documents such a step needs; real torch then mixes the ranks'
    gradients silently (their collectives pair up by order). One case-error
    line each, naming the factory and the parameter or module, exit 11;
    never FS2-9 in torch's column, never an ERROR."""
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    unflagged, sharded = "tests.planted.plans:routed_unflagged", "tests.planted.plans:routed_experts_sharded"
    result, report = run_suite("torch", k="test_model_plan_end_to_end",
                               extra=["--fsdpcheck-model", unflagged, "--fsdpcheck-model", sharded])
    errors = report["case_errors"]
    assert "reach experts.0.bias only on rank 0" in errors.get(unflagged, "") and \
        "set_reduce_scatter_unused_params off" in errors[unflagged], (errors, result.outlines[-30:])
    assert "call experts.0's forward only on rank 0" in errors.get(sharded, ""), errors
    assert "FS2-9" not in report["matrix"].get("torch", {}), report["matrix"].get("torch")
    assert result.ret == EXIT_CASE_ERROR, "\n".join(result.outlines[-20:])
