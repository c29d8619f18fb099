"""Known-bug exposure per model (pytest_fsdpcheck.cases.exposure): a tied
model meets the tied-parameter splitting bugs, an untied one none of them;
predicate-only bugs are listed as "run on that release to know"; the CLI."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

torch = pytest.importorskip("torch")

from pytest_fsdpcheck.cases import ModelCase, build_case  # noqa: E402
from pytest_fsdpcheck.cases.exposure import (  # noqa: E402
    RUN_TO_KNOW,
    bucket_differences,
    bugs_between,
    exposure,
    releases,
    render,
    to_json,
)
from pytest_fsdpcheck.core.bugs import KnownBug  # noqa: E402
from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS  # noqa: E402
from tests.planted import plans  # noqa: E402

BY_ID = {b.id: b for b in TORCH_BUGS}
ROOT = pathlib.Path(__file__).resolve().parents[1]
#: bugs every model meets: the tracer restore and the registry written on read do
#: not depend on the model's structure
MODEL_INDEPENDENT = {"exo-patch-tracer-leaves-bound-methods", "trv-registry-created-on-read"}


@pytest.fixture(scope="module")
def tied():
    case = build_case(plans.drawn, depth=2, tied=True)
    return case, exposure(case)


@pytest.fixture(scope="module")
def untied():
    case = build_case(plans.drawn, depth=2, tied=False)
    return case, exposure(case)


def _exposed(found, area=None):
    return {(e.bug, e.form) for e in found if e.exposed and (area is None or e.area == area)}


def test_tied_model_meets_the_tied_parameter_bugs(tied):
    _case, found = tied
    # the tied embedding/lm_head weight is read twice: counted per node (module form,
    # before 2.4), per use (both forms, from 2.4); the graph form decides the releases
    assert _exposed(found, "splitting") == {
        ("spl-param-counted-per-node", "module"),
        ("spl-param-counted-per-use", "module"),
        ("spl-param-counted-per-use", "dynamo"),
    }
    splitting = {(e.bug, e.form): e for e in found if e.area == "splitting"}
    assert splitting["spl-param-counted-per-node", "module"].releases == "2.0–2.3"
    assert splitting["spl-param-counted-per-use", "module"].releases == "2.4"
    assert splitting["spl-param-counted-per-use", "dynamo"].releases == "2.5–2.15"
    nbytes = plans.TinyLM(depth=2).embed.weight.untyped_storage().nbytes()
    for e in splitting.values():
        assert e.differs == f"bucket 0 counts {nbytes:,} bytes twice (embed.weight)"
        assert e.affects == BY_ID[e.bug].affects and e.how == "replayed"
    lines = render(found, "tied")
    assert f"  bucket plan, dynamo-form graph: bucket 0 counts {nbytes:,} bytes twice (embed.weight): " \
           "spl-param-counted-per-use, torch 2.5–2.15" in lines


def test_a_bug_is_listed_only_in_a_form_a_release_of_its_range_produces(tied):
    # the per-use counting as if it had been measured on 2.0-2.3 only: every
    # release of that range captures module-form graphs, so the dynamo-form
    # graph's difference is not an exposure (it was listed, "torch none measured")
    case, _found = tied
    older = dataclasses.replace(BY_ID["spl-param-counted-per-use"], affects="<2.4")
    found = exposure(case, [older])
    assert {(e.bug, e.form, e.releases) for e in found} == {("spl-param-counted-per-use", "module", "2.0–2.3")}
    # and a bug whose range no measured release falls in is not listed at all
    assert exposure(case, [dataclasses.replace(older, affects=">=3.0")]) == []


def test_a_drawn_factory_is_exposed_over_several_of_its_configurations():
    # the exposure of a factory with drawn arguments replayed only its simplest
    # draw (depth=1, tied=False) and missed the per-use counting every tied
    # configuration meets; now a few configurations, the most different first
    from pytest_fsdpcheck.cases.exposure import MAX_CONFIGURATIONS, configurations, model_exposure

    configs = configurations(plans.drawn)
    assert configs[0] == {"depth": 1, "tied": False}
    assert 2 <= len(configs) <= MAX_CONFIGURATIONS
    assert {c["tied"] for c in configs} == {False, True} and len({c["depth"] for c in configs}) >= 2
    assert configurations(plans.drawn) == configs  # the same every run
    found = model_exposure("tests.planted.plans:drawn")
    per_use = {e.form: e for e in found if e.bug == "spl-param-counted-per-use"}
    assert set(per_use) == {"dynamo", "module"}, found
    tied_configs = tuple(f"depth={c['depth']}, tied=True" for c in configs if c["tied"])
    assert all(e.configs == tied_configs for e in per_use.values())
    line = next(x for x in render(found, "drawn") if "spl-param-counted-per-use, torch 2.5–2.15" in x)
    assert line.endswith(f"(in {tied_configs[0]}" + "".join(f"; also {c}" for c in tied_configs[1:]) + ")")
    # a bug every configuration meets names them all
    tracer = next(e for e in found if e.bug == "exo-patch-tracer-leaves-bound-methods")
    assert len(tracer.configs) == len(configs)


def test_untied_model_meets_no_tied_parameter_bug(untied):
    _case, found = untied
    assert _exposed(found, "splitting") == set()
    assert {bug for bug, _ in _exposed(found)} == MODEL_INDEPENDENT
    assert not any("spl-" in line for line in render(found, "untied"))


def test_exposure_names_the_fsdp2_conflict_a_plan_meets():
    found = exposure(plans.shared_module())
    fsdp2 = [e for e in found if e.area == "fsdp2" and e.exposed]
    assert [e.bug for e in fsdp2] == ["fs2-group-conflict-not-rejected"]
    assert "fully_shard(layers.1) raises TypeError" in fsdp2[0].differs
    assert "is already managed by another fully_shard group" in fsdp2[0].differs


def test_predicate_only_bug_is_listed_never_guessed(tied):
    case, found = tied
    listed = [e for e in found if e.bug == "fs2-gloo-grads-summed"]
    assert len(listed) == 1 and not listed[0].exposed
    assert listed[0].how == "predicate" and listed[0].differs == RUN_TO_KNOW
    assert listed[0].releases == "2.7–2.8"
    assert "  FSDP2 groups: fs2-gloo-grads-summed (torch 2.7–2.8): run on that release to know" in render(found)
    # a model without a plan is not checked in that area: nothing to run it on
    no_plan = ModelCase("no_plan", case.model, case.example_inputs)
    gloo = (BY_ID["fs2-gloo-grads-summed"],)
    assert exposure(no_plan, bugs=gloo) == []
    # a predicate bug is never replayed, whatever the model
    made_up = KnownBug(id="made-up-predicate", invariants=("SPL-4",), reason="r", predicate=lambda v: True)
    only = exposure(case, bugs=(made_up,))
    assert [(e.bug, e.how, e.differs) for e in only] == [("made-up-predicate", "predicate", RUN_TO_KNOW)]


def test_to_json_round_trips(tied):
    _case, found = tied
    data = json.loads(json.dumps(to_json(found)))
    assert {d["bug"] for d in data if d["exposed"]} >= {"spl-param-counted-per-use", "spl-param-counted-per-node"}
    assert all({"bug", "area", "differs", "releases", "affects", "seen", "how", "form"} <= d.keys() for d in data)


def test_releases_and_the_bugs_between_two_releases(tied):
    _case, found = tied
    per_use, per_node = BY_ID["spl-param-counted-per-use"], BY_ID["spl-param-counted-per-node"]
    assert releases(per_use) == "2.4–2.15" and releases(per_use, "dynamo") == "2.5–2.15"
    assert releases(per_node, "dynamo") == "none measured"
    # 2.3 -> 2.4: per-node ends and per-use (module form) begins; 2.5 -> 2.6: nothing changes
    assert set(bugs_between(found, "2.3.1", "2.4.1")) == {"spl-param-counted-per-node", "spl-param-counted-per-use"}
    assert bugs_between(found, "2.5.1", "2.6.0") == []


class _TwoParams(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(4))
        self.v = torch.nn.Parameter(torch.zeros(2))

    def forward(self, x):
        return x * self.w.sum() + self.v.sum()


def test_bucket_differences_in_words():
    gm = torch.fx.symbolic_trace(_TwoParams())
    graph = (gm, [torch.zeros(1)])
    w, v = gm.w, gm.v
    spec = {"buckets": [{"bytes": 8, "ids": [id(v)], "params": ["v"]}, {"bytes": 16, "ids": [id(w)], "params": ["w"]}]}
    moved = {"buckets": [{"bytes": 24, "ids": [id(v), id(w)], "params": ["v", "w"]}, {"bytes": 0, "ids": [], "params": []}]}
    assert bucket_differences(spec, moved, graph) == ["w (16 bytes) counted in bucket 0 instead of 1"]
    lost = {"buckets": [{"bytes": 8, "ids": [id(v)], "params": ["v"]}, {"bytes": 0, "ids": [], "params": []}]}
    assert bucket_differences(spec, lost, graph) == ["w (16 bytes) not counted in any bucket"]
    assert bucket_differences(spec, spec, graph) == []


def _cli(*args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest_fsdpcheck.known", "exposure", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.process
def test_cli_reports_a_model(tmp_path):
    out = tmp_path / "exposure.json"
    done = _cli("--model", "tests.planted.plans:drawn", "--json", str(out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # several of drawn's configurations, tied ones among them
    assert lines[0].startswith("known-bug exposure of drawn over drawn configurations (tests.planted.plans:drawn)")
    data = json.loads(out.read_text())["tests.planted.plans:drawn"]
    assert any("spl-param-counted-per-use" in line and "tied=True" in line for line in lines), lines
    assert all(e["configs"] for e in data["exposures"])
    assert "  FSDP2 groups: fs2-gloo-grads-summed (torch 2.7–2.8): run on that release to know" in lines
    assert {e["bug"] for e in data["exposures"]} >= MODEL_INDEPENDENT


@pytest.mark.process
def test_cli_bad_model_is_one_line():
    done = _cli("--model", "no_such_pkg.mod:factory")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: model 'no_such_pkg.mod:factory': cannot import 'no_such_pkg.mod': "
        "ModuleNotFoundError: No module named 'no_such_pkg'"
    ]


def test_exposure_is_worked_out_only_for_models_a_check_ran_on(monkeypatch):
    """The replay costs up to a minute a model: a run that checked no model
    (--collect-only, a -k deselecting its tests, a usage error) pays
    nothing for it, and a run that checked one model replays that one."""
    from types import SimpleNamespace

    from pytest_fsdpcheck.cases import exposure as ex
    from pytest_fsdpcheck.plugin import verdicts
    from pytest_fsdpcheck.report.matrix import Matrix

    replayed = []
    monkeypatch.setattr(ex, "model_exposure", lambda spec: replayed.append(spec) or [])
    checked, unchecked = "pkg.models:checked", "pkg.models:unchecked"
    session = SimpleNamespace(models=[checked, unchecked], known_bugs=True, matrix=Matrix())
    assert verdicts.exposures(session) == {} and replayed == []
    session = SimpleNamespace(models=[checked, unchecked], known_bugs=True, matrix=Matrix())
    session.matrix.per_test["conformance/test_models.py::test_model_traversal[torch-pkg.models.checked]"] = {}
    assert verdicts.exposures(session) == {checked: []} and replayed == [checked]
