"""The bucket and annotation checks on users' models and the corpus can fail
for the reason they claim, and the known bug ``spl-ddp-ignored-lost-on-fake``
explains only an ignored parameter counted (issue 28 item 5).

torch's DDPOptimizer lists the FakeTensors of Dynamo's ``example_value``:
compared as they are, every bucket of every model "listed parameters not
read in the graph", the reference with that bug's switch said the same, and
every model's SPL-3 read ``known``, a splitter listing the wrong parameters
included."""

import pytest

from pytest_fsdpcheck.cases import build_case, checks
from pytest_fsdpcheck.checks import ConformanceFailure
from pytest_fsdpcheck.known import judge
from pytest_fsdpcheck.report.verdict import EXIT_STRICT
from tests.planted import model_checks as planted

pytestmark = pytest.mark.unit

BUG = "spl-ddp-ignored-lost-on-fake"


@pytest.fixture(autouse=True)
def _fresh_judge():
    judge.reset()
    yield
    judge.reset()


def _corpus_body(model):
    from pytest_fsdpcheck.checks import splitting as chk
    from pytest_fsdpcheck.generators.corpus import CORPUS, captured

    _, gm, example_inputs, _ = captured(model)
    facts = chk.graph_facts(gm, example_inputs)
    spec = CORPUS[model]
    return lambda impl: chk.check_captured_split(impl.splitting, gm, example_inputs, facts,
                                                 spec.bucket_bytes_cap, spec.first_bucket_cap)


def test_torch_buckets_are_compared_through_the_fakes_real_parameters():
    """No DDP-ignored parameter, nothing for the bug to explain: SPL-3 passes
    on torch and the bug is not claimed as reproduced (so a strict run can
    say "not reproduced — fixed?")."""
    checks.check_buckets(build_case(planted.chain), "torch")
    judge.conform(_torch(), _corpus_body("mlp_chain"), form="dynamo")
    assert judge.explained() == {}


def _torch():
    from pytest_fsdpcheck.impls import load_implementation

    return load_implementation("torch")


@pytest.mark.parametrize("impl", [planted.TorchRotated, planted.ReferenceRotated])
def test_rotated_bucket_lists_fail_spl3(impl):
    """Each bucket lists the next one's parameters, sizes right: SPL-3 FAILs,
    on torch's path too, and no known bug explains it."""
    with pytest.raises(ConformanceFailure) as info:
        checks.check_buckets(build_case(planted.chain), impl())
    assert "SPL-3" in info.value.invariants and "which it does not hold" in str(info.value)
    with pytest.raises(ConformanceFailure) as info:
        judge.conform(impl(), _corpus_body("mlp_chain"), form="dynamo")
    assert "SPL-3" in info.value.invariants
    assert judge.explained() == {}


def test_the_ignored_bug_explains_an_ignored_parameter_counted_and_nothing_else():
    case = build_case(planted.ignored_layer)
    checks.check_buckets(case, "torch")
    assert list(judge.explained()) == [BUG]
    judge.reset()
    # the same bug next to lists rotated between buckets: not explained
    with pytest.raises(ConformanceFailure) as info:
        checks.check_buckets(case, planted.TorchRotated())
    assert "SPL-3" in info.value.invariants


def test_ddp_ignored_marks_survive_the_models_copy():
    """Parameter.__deepcopy__ drops _ddp_ignored: the bucket check's copy
    keeps it, so a splitter counting ignored parameters fails on a user's
    model, and the exposure sees the bug that model meets."""
    from pytest_fsdpcheck.cases.exposure import exposure

    case = build_case(planted.ignored_layer)
    with pytest.raises(ConformanceFailure) as info:
        checks.check_buckets(case, planted.CountsIgnored())
    assert "SPL-3" in info.value.invariants and "(DDP-ignored)" in str(info.value)
    exposed = {e.bug for e in exposure(case) if e.exposed}
    assert BUG in exposed


def test_spl15_is_not_provided_where_the_spec_extends_a_bucket():
    """SPL-15 has a check of its own, n/p with the reason where DDP's
    assignment has nothing to compare; check_buckets no longer claims it."""
    from pytest_fsdpcheck.conformance import test_golden

    from pytest_fsdpcheck.cases import ModelCase
    from pytest_fsdpcheck.generators.corpus import CORPUS, build

    assert "SPL-15" not in checks.CHECKS["check_buckets"][1]
    assert checks.CHECKS["check_bucket_assignment"][1] == ("SPL-15",)
    reason = "extends a bucket past its cap to reach an output"
    with pytest.raises(pytest.skip.Exception, match=f"not provided: .*{reason}"):
        test_golden.test_corpus_ddp_assignment(_torch(), "inplace_boundary")
    spec = CORPUS["inplace_boundary"]
    model, x = build("inplace_boundary")
    mib = 1024 * 1024
    case = ModelCase("inplace", model, (x,), bucket_cap_mb=spec.bucket_bytes_cap / mib,
                     first_bucket_cap_mb=spec.first_bucket_cap / mib)
    with pytest.raises(pytest.skip.Exception, match=f"not provided: .*{reason}"):
        checks.check_bucket_assignment(case, "torch")
    checks.check_bucket_assignment(build_case(planted.chain), "torch")  # judged, and passes
    # judged, so it can fail: a splitter that gives the first bucket the others' cap
    from tests.planted.splitting import IgnoresFirstCap

    small_first = build_case(planted.chain_small_first_bucket)
    checks.check_bucket_assignment(small_first, "torch")
    with pytest.raises(ConformanceFailure) as info:
        checks.check_bucket_assignment(small_first, IgnoresFirstCap())
    assert info.value.invariants == ["SPL-15"], str(info.value)


def test_annotation_runs_with_the_plans_ignored_modules():
    """ANN-3 on users' models: the annotation is given the modules the
    plan's fully_shard calls ignore; an annotation that skips an ignored
    module's subtree fails ANN-3 only where the plan ignores one."""
    from tests.planted.annotation import SkipsIgnoredSubtrees

    case = build_case(planted.gated)
    assert checks.plan_ignored_modules(case) == ("gated",)
    assert checks.CHECKS["check_annotation_ignored"][1] == ("ANN-3",)
    for check in (checks.check_annotation, checks.check_annotation_ignored):
        with pytest.raises(ConformanceFailure) as info:
            check(case, SkipsIgnoredSubtrees())
        assert "ANN-3" in info.value.invariants and "gated.proj" in str(info.value)
        check(case, "torch")
        check(case, "reference")
    plain = build_case(planted.gated_without_ignored)
    checks.check_annotation(plain, SkipsIgnoredSubtrees())
    with pytest.raises(pytest.skip.Exception, match="not provided: .*ignores no module"):
        checks.check_annotation_ignored(plain, SkipsIgnoredSubtrees())


@pytest.mark.plugin
def test_strict_can_say_the_ignored_bug_is_not_reproduced(run_suite):
    """A run meeting no DDP-ignored parameter (the corpus's mlp_chain) does
    not claim the bug: strict reports it "not reproduced — fixed?" (SPL-3
    read "known" there, so it never could)."""
    import pathlib

    suite = pathlib.Path(__file__).resolve().parents[1] / "conformance" / "test_golden.py"
    result, report = run_suite(extra=("--fsdpcheck-strict", f"{suite}::test_corpus_split_invariants[torch-mlp_chain]"))
    assert report is not None, result.stdout.str()
    assert report["matrix"]["torch"]["SPL-3"]["outcome"] == "pass", report["matrix"]["torch"]
    entry = next(e for e in report["known_bugs"] if e["id"] == BUG)
    assert entry["not_reproduced"] and entry["examples"] == 0, entry
    result.stdout.fnmatch_lines([f"*known bug {BUG} *not reproduced on torch*fixed?*"])
    assert result.ret == EXIT_STRICT  # strict's finding alone: the declarations' status
