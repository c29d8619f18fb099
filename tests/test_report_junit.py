"""JUnit XML as CI systems read it (issue 42 item 2): one testcase per
invariant x implementation, drawn from the JSON report's content; each
verdict as its own element; GitHub annotations per FAIL. In-process, no
torch."""

import xml.etree.ElementTree as ET

import pytest

from pytest_fsdpcheck.report.junit import github_annotations, junit_xml

pytestmark = pytest.mark.unit

NODE = "test_traversal.py::test_root_states[torch]"

CONTENT = {
    "header": {"torch": "2.13.0", "implementations": ["torch"]},
    "matrix": {"torch": {
        "TRV-7": {"outcome": "fail", "tests": 2},
        "TRV-8": {"outcome": "known", "tests": 1, "known": ["trv-root-states-walk-modules"]},
        "FS2-9": {"outcome": "error", "tests": 1},
        "SPL-14": {"outcome": "not provided", "tests": 1, "reasons": ["torch 2.0 has no higher-order ops"]},
        "TRV-1": {"outcome": "pass", "tests": 3},
        "ANN-7": {"outcome": "divergence", "tests": 1, "reasons": []},
    }},
    "tests": {NODE: {"outcome": "failed", "implementation": "torch", "invariants": ["TRV-7", "TRV-9"],
                     "failure": {"invariants": ["TRV-7"], "message": "TRV-7: root states lost m2 & <m3>\nmore",
                                 "reproducer": "impl = load_implementation('torch')"}}},
    "case_errors": {"pkg.models:make": "model pkg.models:make: plan raised KeyError: 'x'"},
}


def _cases():
    root = ET.fromstring(junit_xml(CONTENT))
    suite = root.find("testsuite")
    return suite, {case.get("name"): case for case in suite.iter("testcase")}


def test_one_testcase_per_invariant_and_implementation_named_and_classed_by_area():
    suite, cases = _cases()
    assert set(cases) == {"TRV-7[torch]", "TRV-8[torch]", "FS2-9[torch]", "SPL-14[torch]", "TRV-1[torch]",
                          "ANN-7[torch]", "pkg.models:make"}
    assert cases["TRV-7[torch]"].get("classname") == "fsdpcheck.traversal"
    assert cases["FS2-9[torch]"].get("classname") == "fsdpcheck.fsdp2"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("7", "1", "2", "3")


def test_each_verdict_is_its_own_element():
    _, cases = _cases()
    failure = cases["TRV-7[torch]"].find("failure")
    assert failure.get("message") == "TRV-7: root states lost m2 & <m3>"  # one line, escaped and read back
    assert f'pytest --fsdpcheck --fsdpcheck-impl torch "{NODE}"' in failure.text
    assert "load_implementation('torch')" in failure.text
    known = cases["TRV-8[torch]"].find("skipped")
    assert known.get("type") == "known" and "trv-root-states-walk-modules" in known.get("message")
    assert cases["SPL-14[torch]"].find("skipped").get("type") == "n/p"
    assert "no higher-order ops" in cases["SPL-14[torch]"].find("skipped").get("message")
    assert cases["ANN-7[torch]"].find("skipped").get("type") == "declared"
    assert cases["FS2-9[torch]"].find("error") is not None
    assert list(cases["TRV-1[torch]"]) == []
    assert cases["pkg.models:make"].find("error").get("type") == "case error"


def test_no_hypothesis_blobs_and_the_header_as_json():
    text = junit_xml(CONTENT)
    assert "hypothesis" not in text.lower() and "base64" not in text
    suite, _ = _cases()
    [prop] = suite.find("properties")
    assert prop.get("name") == "fsdpcheck" and '"torch": "2.13.0"' in prop.get("value")


def test_a_github_annotation_per_fail():
    lines = github_annotations(CONTENT)
    assert lines == [f'::error title=fsdpcheck TRV-7 [torch]::TRV-7: root states lost m2 & <m3> '
                     f'(re-run: pytest --fsdpcheck --fsdpcheck-impl torch "{NODE}")']


MAKE, OTHER = "pkg.models:make", "pkg.models:other"
MODEL_NODE = "conformance/test_models.py::test_model_plan_end_to_end[torch-pkg.models.make]"
SUITE_NODE = "conformance/test_fsdp2.py::test_world[torch]"


def _failed(invariants, model=None):
    return {"outcome": "failed", "implementation": "torch", "invariants": invariants,
            **({"model": model} if model else {}),
            "failure": {"invariants": invariants, "message": f"{invariants[0]}: wrong gradients", "reproducer": None}}


MODELS = {
    "header": {"torch": "2.13.0", "implementations": ["torch"], "world_size": 4},
    "matrix": {"torch": {"FS2-9": {"outcome": "fail", "tests": 3}, "FS2-1": {"outcome": "pass", "tests": 2}}},
    "models": {MAKE: {"torch": {"FS2-9": {"outcome": "fail", "tests": 1}}},
               OTHER: {"torch": {"FS2-9": {"outcome": "pass", "tests": 1}, "FS2-1": {"outcome": "pass", "tests": 1}}}},
    "tests": {MODEL_NODE: _failed(["FS2-9"], MAKE), SUITE_NODE: _failed(["FS2-9"])},
}


def test_a_testcase_per_model_names_the_model_and_reruns_it():
    """Issue 56, item 4: a CI's test report shows which model failed, and
    its re-run command names the model (without --fsdpcheck-model its test
    is not collected) and the run's world size."""
    suite = ET.fromstring(junit_xml(MODELS)).find("testsuite")
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert set(cases) == {"FS2-9[torch]", "FS2-1[torch]", f"FS2-9[torch][{MAKE}]", f"FS2-9[torch][{OTHER}]",
                          f"FS2-1[torch][{OTHER}]"}
    assert (suite.get("tests"), suite.get("failures")) == ("5", "2")  # the invariant's case holds every test
    assert {case.get("classname") for case in cases.values()} == {"fsdpcheck.fsdp2"}
    mine = cases[f"FS2-9[torch][{MAKE}]"].find("failure").text
    rerun = (f"pytest --fsdpcheck --fsdpcheck-impl torch --fsdpcheck-model {MAKE} --fsdpcheck-world-size 4 "
             f'"test_models.py::test_model_plan_end_to_end[torch-pkg.models.make]"')
    assert rerun in mine and SUITE_NODE not in mine  # the model's case: its own tests alone
    every = cases["FS2-9[torch]"].find("failure").text
    assert rerun in every and 'pytest --fsdpcheck --fsdpcheck-impl torch --fsdpcheck-world-size 4 "test_fsdp2.py' in every
    assert list(cases[f"FS2-9[torch][{OTHER}]"]) == []
    only_model = {**MODELS, "tests": {MODEL_NODE: MODELS["tests"][MODEL_NODE]}}
    assert github_annotations(only_model) == [f"::error title=fsdpcheck FS2-9 [torch]::FS2-9: wrong gradients (re-run: {rerun})"]
