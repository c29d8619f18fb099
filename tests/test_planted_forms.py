"""Splitting is checked in every graph form an implementation accepts, the
form in the test id; a known bug declared for one form hides nothing in the
other, and a form an implementation does not accept is n/p, never a pass."""

from tests.helpers import NO_SHRINK

MODULE = "tests.planted.forms"


def test_a_bug_declared_for_one_form_fails_in_the_other(run_suite):
    spec = f"{MODULE}:PerUseDeclaredForModuleForm"
    result, report = run_suite(spec, k="test_counted_once_cases", extra=NO_SHRINK)
    assert report is not None, result.stdout.str()
    outcomes = {nodeid.split("::")[-1]: test["outcome"] for nodeid, test in report["tests"].items()}
    tied = {form: outcomes[f"test_counted_once_cases[{spec}-{form}-tied-weights]"] for form in ("module", "dynamo")}
    assert tied == {"module": "xfail", "dynamo": "failed"}, outcomes
    assert report["matrix"][spec]["SPL-4"]["outcome"] == "fail"
    assert "SPL-4" in result.stdout.str()


def test_a_form_not_accepted_is_not_provided(run_suite):
    spec = f"{MODULE}:DynamoFormOnly"
    result, report = run_suite(spec, k="test_counted_once_cases and tied", extra=(*NO_SHRINK, "-rs"))
    assert report is not None, result.stdout.str()
    outcomes = {nodeid.split("::")[-1]: test["outcome"] for nodeid, test in report["tests"].items()}
    assert outcomes[f"test_counted_once_cases[{spec}-dynamo-tied-weights]"] == "passed", outcomes
    assert outcomes[f"test_counted_once_cases[{spec}-module-tied-weights]"] == "skipped", outcomes
    assert "not provided: tests.planted.forms:DynamoFormOnly accepts dynamo-form graphs, not module form" in result.stdout.str()
