"""A framework's own model and plan, as a user runs them: a package with one
model factory, installed into a new virtual environment, checked with
``pytest --fsdpcheck --fsdpcheck-model mypkg:make`` (and found through its
entry point with no option at all); bad factories stop the run in one line."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import sysconfig
import textwrap

import pytest

pytestmark = pytest.mark.e2e

REPO = pathlib.Path(__file__).resolve().parents[1]

MYPKG = '''
import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

from pytest_fsdpcheck.cases import ModelCase


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.mlp = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class TinyLM(nn.Module):
    def __init__(self, tied):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.layers = nn.ModuleList(Block() for _ in range(2))
        self.lm_head = nn.Linear(8, 16, bias=False)
        if tied:
            self.lm_head.weight = self.embed.weight

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(h)


def plan(model, mesh):
    # as the framework does it: layers first, the tied pair in one group, the root last
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard([model.embed, model.lm_head], mesh=mesh)
    fully_shard(model, mesh=mesh)


def split_tied_plan(model, mesh):
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model.embed, mesh=mesh)
    fully_shard(model.lm_head, mesh=mesh)
    fully_shard(model, mesh=mesh)


def make():
    return ModelCase("tiny-lm", TinyLM(tied=True), (torch.randint(0, 16, (2, 5)),), plan=plan)


def make_split():
    return ModelCase("tiny-lm-split", TinyLM(tied=True), (torch.randint(0, 16, (2, 5)),), plan=split_tied_plan)


def make_plain():
    return TinyLM(tied=False), (torch.randint(0, 16, (2, 5)),)


def make_wrong():
    return "not a model"


def make_missing_unit():
    return ModelCase("bad-units", TinyLM(tied=False), (torch.randint(0, 16, (2, 5)),), fsdp1_units=("layers.7",))
'''

PYPROJECT = '''
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "mypkg"
version = "0.1"

[project.entry-points."pytest_fsdpcheck.models"]
tiny = "mypkg:make"
'''


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A new venv that sees this one's packages (torch, pytest, the plugin)
    through a .pth file, with ``mypkg`` pip-installed into it."""
    root = tmp_path_factory.mktemp("user")
    pkg = root / "src"
    (pkg / "mypkg").mkdir(parents=True)
    (pkg / "mypkg" / "__init__.py").write_text(textwrap.dedent(MYPKG))
    (pkg / "pyproject.toml").write_text(PYPROJECT)
    env_dir = root / "venv"
    # no pip of its own: pip and setuptools come with the outer packages
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # addsitedir, not a bare path: the outer .pth files (an editable install's finder) must run too
    pathlib.Path(site, "outer.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(pkg)],
                   check=True, capture_output=True)
    work = root / "work"
    work.mkdir()
    return python, work


def _pytest(venv, *args):
    python, work = venv
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FSDPCHECK_", "PYTEST_"))}
    return subprocess.run([str(python), "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
                          cwd=work, capture_output=True, text=True, env=env, timeout=900)


def test_an_installed_factory_runs_through_every_area(venv):
    report = venv[1] / "report.json"
    run = _pytest(venv, "--fsdpcheck", "--fsdpcheck-model", "mypkg:make", "--fsdpcheck-impl", "torch",
                  "--fsdpcheck-impl", "reference", "-k", "test_model", "--fsdpcheck-report", str(report), "-rs")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "your models: mypkg:make" in run.stdout
    data = json.loads(report.read_text())
    ran = {nodeid.split("::")[1].split("[")[0] for nodeid in data["tests"]}
    # FSDP2 (walk, recorded calls, replayed calls), buckets, traversal, annotation, exec order; the
    # plan's rules are the case's (no case error: they hold)
    assert {"test_model_fsdp2_walk", "test_model_fsdp2_recorded", "test_model_buckets",
            "test_model_traversal", "test_model_annotation", "test_model_exec_order"} <= ran
    assert data["case_errors"] == {}, data["case_errors"]
    for impl in ("torch", "reference"):
        for inv in ("FS2-1", "SPL-2", "TRV-1", "ANN-1", "EXO-2"):
            assert data["matrix"][impl][inv]["outcome"] in ("pass", "known"), (impl, inv, data["matrix"][impl][inv])
    # the tied embedding meets the modelled per-use counting bug, on the releases it holds
    assert "known-bug exposure of mypkg:make" in run.stdout
    exposed = {e["bug"] for e in data["exposure"]["mypkg:make"] if e["exposed"]}
    assert "spl-param-counted-per-use" in exposed


def test_a_plan_splitting_tied_weights_is_the_users_mistake_naming_the_factory_and_the_rule(venv):
    run = _pytest(venv, "--fsdpcheck", "--fsdpcheck-model", "mypkg:make_split", "--fsdpcheck-impl", "reference",
                  "-k", "test_model_case or test_model_fsdp2_walk")
    assert run.returncode == 11, run.stdout[-3000:]
    assert "model mypkg:make_split: PLN-1: tied parameters split across groups" in run.stdout
    assert "embed.weight" in run.stdout and "page its owner" not in run.stdout


def test_the_entry_point_is_found_without_an_option(venv):
    run = _pytest(venv, "--fsdpcheck", "--fsdpcheck-impl", "reference", "-k", "test_model_case", "-v")
    assert run.returncode == 0, run.stdout[-3000:]
    assert "your models: tiny" in run.stdout
    assert "test_model_case[tiny]" in run.stdout


@pytest.mark.parametrize(("spec", "says"), [
    ("mypkg:nothere", "'mypkg' has no attribute 'nothere'"),
    ("nopkg:make", "nopkg"),
    ("mypkg:make_wrong", "make_wrong returned a str"),
    ("mypkg:make_missing_unit", "layers.7"),
])
def test_a_bad_factory_stops_the_run_in_one_line(venv, spec, says):
    run = _pytest(venv, "--fsdpcheck", "--fsdpcheck-model", spec, "--co")
    assert run.returncode == 4, run.stdout[-2000:] + run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR: fsdpcheck:")]
    assert len(errors) == 1 and says in errors[0], run.stderr
    assert "Traceback" not in run.stderr
