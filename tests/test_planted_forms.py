"""Splitting is checked in every graph form an implementation accepts, the
form in the test id; a known bug declared for one form hides nothing in the
other, and a form an implementation does not accept is n/p, never a pass."""

import pytest

from tests.helpers import PLANTED_RUN

pytestmark = pytest.mark.unit

MODULE = "tests.planted.forms"


@pytest.mark.kill
def test_a_bug_declared_for_one_form_fails_in_the_other(run_suite):
    spec = f"{MODULE}:PerUseDeclaredForModuleForm"
    result, report = run_suite(spec, k="test_counted_once_cases", extra=PLANTED_RUN)
    assert report is not None, result.stdout.str()
    outcomes = {nodeid.split("::")[-1]: test["outcome"] for nodeid, test in report["tests"].items()}
    tied = {form: outcomes[f"test_counted_once_cases[{spec}-{form}-tied-weights]"] for form in ("module", "dynamo")}
    assert tied == {"module": "xfail", "dynamo": "failed"}, outcomes
    assert report["matrix"][spec]["SPL-4"]["outcome"] == "fail"
    assert "SPL-4" in result.stdout.str()


@pytest.mark.kill
def test_a_form_not_accepted_is_not_provided(run_suite):
    spec = f"{MODULE}:DynamoFormOnly"
    result, report = run_suite(spec, k="test_counted_once_cases and tied", extra=(*PLANTED_RUN, "-rs"))
    assert report is not None, result.stdout.str()
    outcomes = {nodeid.split("::")[-1]: test["outcome"] for nodeid, test in report["tests"].items()}
    assert outcomes[f"test_counted_once_cases[{spec}-dynamo-tied-weights]"] == "passed", outcomes
    assert outcomes[f"test_counted_once_cases[{spec}-module-tied-weights]"] == "skipped", outcomes
    assert "not provided: tests.planted.forms:DynamoFormOnly accepts dynamo-form graphs, not module form" in result.stdout.str()


# --- the torch adapters decide what a release provides by its version -------------
# (pytest_fsdpcheck.core.provided): a reworded source or a renamed function fails
# the checks that need it, never turns them n/p.


def test_reworded_compile_fn_keeps_module_form(monkeypatch):
    import inspect

    from pytest_fsdpcheck.impls.torch_splitting import TorchSplitting

    monkeypatch.setattr(inspect, "getsource", lambda obj: "def compile_fn(self, gm, example_inputs): ...")
    assert TorchSplitting().graph_forms == ("dynamo", "module")


def test_fsdp2_features_follow_the_release_not_the_signature(monkeypatch):
    from pytest_fsdpcheck.core.provided import expected_provided, installed_torch
    from pytest_fsdpcheck.impls import torch_fsdp2

    init = torch_fsdp2._first_module(torch_fsdp2._INIT_MODULES)
    walk = init._get_managed_modules

    def renamed_arguments(root_module, *rest):  # one root, no ignored_params: as torch 2.3 spelt it
        return walk(root_module, *rest)

    monkeypatch.setattr(init, "_get_managed_modules", renamed_arguments)
    area = torch_fsdp2.TorchFsdp2()
    assert area.several_roots == expected_provided("fsdp2.several_roots", installed_torch())
    assert area.takes_ignored_params == expected_provided("fsdp2.ignored_params", installed_torch())


def test_fsdp2_missing_on_a_release_that_provides_it_says_so(monkeypatch):
    import pytest

    from pytest_fsdpcheck.core.provided import expected_provided, installed_torch
    from pytest_fsdpcheck.impls import torch_fsdp2

    assert expected_provided("fsdp2", installed_torch())
    init = torch_fsdp2._first_module(torch_fsdp2._INIT_MODULES)
    monkeypatch.delattr(init, "_get_managed_modules")
    with pytest.raises(ImportError, match="should provide FSDP2"):
        torch_fsdp2.TorchFsdp2()


def test_provided_table():
    import pytest

    from pytest_fsdpcheck.core.catalog import AREAS
    from pytest_fsdpcheck.core.provided import expected_provided, releases

    assert all(expected_provided(area, "2.13.0+cpu") for area in AREAS)
    assert not expected_provided("fsdp2", "2.2.2") and expected_provided("fsdp2", (2, 3))
    assert not expected_provided("fsdp2.ignored_params", "2.6.0") and expected_provided("fsdp2.ignored_params", "2.7.1")
    assert expected_provided("splitting.module_form", "2.0.1") and not expected_provided("splitting.dynamo_form", "2.4.1")
    assert expected_provided("splitting.dynamo_form", "2.5.1")
    # DDPOptimizer's lazy path: read in 2.3.1 and 2.4.1 only; 2.2.2 has no flag, 2.5.1-2.15.0 keep the flag but not the path
    assert expected_provided("splitting.lazy_compile", "2.3.1") and expected_provided("splitting.lazy_compile", "2.4.1")
    assert not any(expected_provided("splitting.lazy_compile", v) for v in ("2.2.2", "2.5.1", "2.13.0"))
    assert releases("splitting.lazy_compile") == "2.3-2.4" and releases("fsdp2") == "2.3 on"
    # split_module sorting two symbolic sizes: measured failing on 2.2.2, passing on 2.3.1
    assert not expected_provided("splitting.symbolic_cross_bucket", "2.2.2")
    assert expected_provided("splitting.symbolic_cross_bucket", "2.3.1")
    with pytest.raises(KeyError):
        expected_provided("no-such-area", "2.13.0")


def test_lazy_compile_follows_the_release(monkeypatch):
    """The torch adapter's lazy mode is the table's: asked for on a release
    without the path, a clear error; on one the table gives it but whose
    DDPOptimizer lacks it, an error naming the finding (never an eager
    split passed off as a lazy one)."""
    import pytest

    from pytest_fsdpcheck.core.provided import expected_provided, installed_torch
    from pytest_fsdpcheck.generators.graphs import GraphSpec, ModuleSpec, OpSpec, build_graph
    from pytest_fsdpcheck.impls import torch_splitting

    spec = GraphSpec(4, 2, (ModuleSpec("linear"),), (), 0, (OpSpec("module", 0),))
    provided = expected_provided("splitting.lazy_compile", installed_torch())
    assert torch_splitting.TorchSplitting().lazy_compile == provided
    if not provided:
        built = build_graph(spec, "dynamo")
        with pytest.raises(ValueError, match="no lazy compile path"):
            torch_splitting.TorchSplitting().split(built.gm, built.example_inputs, bucket_bytes_cap=1, first_bucket_cap=1,
                                                   backend=lambda gm, ex: gm, lazy_compile=True)
    monkeypatch.setattr(torch_splitting, "_lazy_path_provided", lambda version: True)
    monkeypatch.delattr(torch_splitting.importlib.import_module(torch_splitting.MODULE), "SubmoduleReplacer", raising=False)
    built = build_graph(spec, "dynamo")
    with pytest.raises(RuntimeError, match="recorded for this torch release but was not found"):
        torch_splitting.TorchSplitting().split(built.gm, built.example_inputs, bucket_bytes_cap=1, first_bucket_cap=1,
                                               backend=lambda gm, ex: gm, lazy_compile=True)


def test_two_symbols_across_a_bucket_are_np_only_before_the_release_that_sorts_them(monkeypatch):
    """The n/p for split_module's unsortable symbols is decided by the
    release alone and only for the case holding two symbolic sizes, dynamic
    kinds only: on 2.3 and later (and for every other case or the static
    kind on any release) the check runs, so a split failing there is a FAIL."""
    import importlib

    import pytest

    from pytest_fsdpcheck.core import provided
    from pytest_fsdpcheck.core.not_provided import NotProvided

    splitting_suite = importlib.import_module("conformance.test_splitting_compiled")
    monkeypatch.setattr(provided, "installed_torch", lambda: (2, 2))
    with pytest.raises(NotProvided) as raised:
        splitting_suite._require_symbols_by_release("sequence-mean", "eager")
    assert raised.value.release_lacks == "splitting.symbolic_cross_bucket"
    assert "2.3 on" in str(raised.value) and "torch 2.2" in str(raised.value)
    for case, kind in (("sequence-mean", "aot-static"), ("linear-chain", "eager"), ("linear-chain", "aot")):
        splitting_suite._require_symbols_by_release(case, kind)
    monkeypatch.setattr(provided, "installed_torch", lambda: (2, 3))
    for kind in ("eager", "aot", "aot-static"):
        splitting_suite._require_symbols_by_release("sequence-mean", kind)
