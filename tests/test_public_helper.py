"""parametrize_with_checks from a plain test file (no --fsdpcheck): every
check on a correct plan passes, and a planted plan fails with its ID and a
reproducer importing the user's factory."""

import pytest

pytestmark = pytest.mark.unit

pytest_plugins = ["pytester"]

pytest.importorskip("torch.distributed.fsdp")


@pytest.mark.plugin
def test_helper_from_a_plain_test_file(pytester, monkeypatch):
    import os
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(
        test_user="""
        from pytest_fsdpcheck.cases import parametrize_with_checks
        from tests.planted.plans import good, tied_split

        @parametrize_with_checks([good, "tests.planted.plans:plain", tied_split, "tests.planted.mistakes:plan_raises"])
        def test_fsdp(case, check):
            check(case)
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-rfs")
    outcomes = result.parseoutcomes()
    text = result.stdout.str()
    # tied_split breaks PLN-1 and plan_raises raises: each is the case's
    # error (the user's), once, in one line naming the factory and the rule
    # or the cause; every other check skips on it (no implementation judged)
    assert outcomes.get("failed") == 2, text
    from tests.helpers import failure_sections

    sections = failure_sections(result.outlines)
    section = sections["test_fsdp[tied_split-check_case]"].strip()
    assert section.startswith("model tests.planted.plans:tied_split: PLN-1: tied parameters split"), section
    assert len(section.splitlines()) == 1, section
    section = sections["test_fsdp[tests.planted.mistakes:plan_raises-check_case]"]
    assert section.strip() == "model tests.planted.mistakes:plan_raises: plan raised KeyError: 'x'", section
    from pytest_fsdpcheck.cases.checks import CHECKS

    # every check but check_case skips on them
    assert f"SKIPPED [{len(CHECKS) - 1}]" in text and "plan raised KeyError: 'x' (the case's error, reported once by check_case)" in text
    assert "PLN-1: tied parameters split" in text.split("SKIPPED", 1)[1]
    assert outcomes.get("passed", 0) >= 15, text  # good's and plain's checks
    assert "not provided: case 'plain' gives no FSDP2 plan" in text


def _check(name, source, impl):
    """The bound check ``parametrize_with_checks`` gives a user's test."""
    from pytest_fsdpcheck.cases import parametrize_with_checks

    [param] = [p for p in parametrize_with_checks([source], impl=impl).args[1] if p.id.endswith("-" + name)]
    return param.values[1]


@pytest.fixture(scope="module")
def tied():
    from pytest_fsdpcheck.cases import build_case
    from tests.planted import plans

    return build_case(plans.drawn, depth=2, tied=True)


def test_a_known_torch_bug_is_an_xfail_naming_it(tied):
    """As the plugin reports it: torch 2.5-2.15 count a tied weight read twice
    twice (spl-param-counted-per-use), an xfail naming the bug, never a pass."""
    check = _check("check_buckets", tied, None)
    with pytest.raises(pytest.xfail.Exception, match=r"known: spl-param-counted-per-use \(\d+ examples\)"):
        check(tied)


def test_a_second_bug_beside_a_known_one_still_fails(tied):
    from pytest_fsdpcheck.checks import ConformanceFailure

    check = _check("check_buckets", tied, "tests.planted.known:Plus_spl_param_counted_per_use")
    with pytest.raises(ConformanceFailure, match="SPL-"):
        check(tied)


def test_an_implementation_running_torchs_code_is_told_how_to_declare_its_bugs(tied):
    from pytest_fsdpcheck.checks import ConformanceFailure

    with pytest.raises(ConformanceFailure) as failure:
        _check("check_buckets", tied, "tests.planted.known:WrapsTorch")(tied)
    notes = "\n".join(getattr(failure.value, "__notes__", []))
    assert "torch's known bug spl-param-counted-per-use" in notes and 'known_bugs = "torch"' in notes, notes
    with pytest.raises(pytest.xfail.Exception, match="known: spl-param-counted-per-use"):
        _check("check_buckets", tied, "tests.planted.known:WrapsTorchDeclaring")(tied)


def test_known_bugs_takes_torch_or_a_sequence():
    from pytest_fsdpcheck.impls import ImplementationError, load_implementation

    with pytest.raises(ImplementationError, match="known_bugs = 'pytorch'.*'torch' for an implementation that runs torch's own code"):
        load_implementation("tests.planted.known:DeclaresUnknownName")
