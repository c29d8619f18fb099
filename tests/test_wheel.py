"""The suite collects from an installed wheel, from any directory."""

from __future__ import annotations

import os
import pathlib
import site
import subprocess
import sys
import zipfile

import pytest

pytestmark = pytest.mark.e2e

REPO = pathlib.Path(__file__).resolve().parents[1]


def _run(cmd, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy of the tracked files: an in-place build leaves build/
    # and *.egg-info behind in the checkout.
    src = tmp / "src"
    files = _run(["git", "ls-files", "-z"], cwd=REPO).stdout.split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes((REPO / name).read_bytes())
    dist = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)])
    (built,) = dist.glob("pytest_fsdpcheck-*.whl")
    return built


def test_wheel_ships_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"pytest_fsdpcheck", next(t for t in top if t.endswith(".dist-info"))}, sorted(top)
    assert "pytest_fsdpcheck/conformance/test_traversal.py" in names
    assert "pytest_fsdpcheck/fixtures/golden/mlp_chain.txt" in names
    # the known-bug reproducers are scripts whose names are bug ids
    assert "pytest_fsdpcheck/known/reproducers/spl-param-counted-per-use.py" in names
    # the JSON report's published schema (pytest_fsdpcheck.report.schema() reads it)
    assert "pytest_fsdpcheck/report.schema.json" in names
    assert not any(n.startswith(("conformance/", "fixtures/", "tests/")) for n in names)


def test_suite_runs_from_installed_wheel(wheel, tmp_path, monkeypatch):
    from tests.helpers import OthersWrites

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)])
    inner_site = pathlib.Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    # torch, pytest and hypothesis come from this environment without a
    # download. A plain path entry (unlike --system-site-packages of a venv)
    # runs none of this environment's .pth files, so the editable install of
    # the project stays out and the wheel is what gets imported.
    outer = [p for p in site.getsitepackages() if pathlib.Path(p).is_dir()]
    (inner_site / "outer-env.pth").write_text("\n".join(outer) + "\n")

    empty = tmp_path / "empty"
    empty.mkdir()
    others = OthersWrites(monkeypatch, tmp_path / "outside")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FSDPCHECK_IMPL", "PYTEST_ADDOPTS")}
    code = "import pytest_fsdpcheck.plugin as p, pytest_fsdpcheck.collection as c; print(p.__file__); print(c.conformance_dir())"
    where = _run([str(python), "-c", code], cwd=empty, env=env).stdout.split()
    assert all(pathlib.Path(w).is_relative_to(inner_site) for w in where), where

    proc = subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", *others.args, "--fsdpcheck", "-k", "test_states_with_modules",
         "--fsdpcheck-impl", "reference"],
        cwd=empty, env={**env, "PYTHONPATH": others.pythonpath}, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout, proc.stdout
    assert "test_traversal.py ." in proc.stdout, proc.stdout
    assert [p.name for p in empty.iterdir() if p.name not in others.names()] == []


def _history_releases() -> list[str]:
    """The releases of the documented conformance-history table (its header row)."""
    history = (REPO / "docs" / "history.md").read_text(encoding="utf-8")
    (header,) = [line for line in history.splitlines() if line.startswith("invariant ") and "2.0.1" in line]
    return header.split()[1:]


def test_declared_torch_range_admits_every_release_the_docs_show_green(wheel):
    from packaging.requirements import Requirement

    metadata = zipfile.ZipFile(wheel).read("pytest_fsdpcheck-0.1.0.dist-info/METADATA").decode()
    requires = [Requirement(line.split(":", 1)[1]) for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    (torch,) = [r for r in requires if r.name == "torch" and r.marker is None]
    releases = _history_releases()
    assert len(releases) >= 16 and releases[0] == "2.0.1", releases
    refused = [v for v in releases if not torch.specifier.contains(v)]
    assert not refused, f"`pip install pytest-fsdpcheck` refuses torch {refused} ({torch})"
    # torch warns "Failed to initialize NumPy" at every import without it
    assert any(r.name == "numpy" and r.marker is None for r in requires), requires


def test_history_installs_the_package_as_a_user_would(tmp_path):
    from pytest_fsdpcheck.known import history

    wheel = tmp_path / "pytest_fsdpcheck-0.1.0-py3-none-any.whl"
    constraints = tmp_path / "constraints.txt"
    for version, numpy in [("2.0.1", ["numpy<2"]), ("2.3.1", ["numpy<2"]), ("2.4.1", []), ("2.13.0", [])]:
        assert history.pinned(version) == [f"torch=={version}", *numpy]
        torch_step, package_step = history.install_commands(tmp_path / "python", version, wheel, constraints)
        assert torch_step[-1 - len(numpy):] == [f"torch=={version}", *numpy], torch_step
        # dependencies resolved by pip, the models extra with them, the pinned
        # release held by the constraints file rather than by --no-deps
        assert "--no-deps" not in package_step and package_step[-1] == f"{wheel}[models]", package_step
        assert package_step[package_step.index("--constraint") + 1] == str(constraints), package_step


def test_history_package_step_resolves_without_replacing_torch(wheel, tmp_path):
    """The package step as history runs it, resolved by pip against this
    environment (dry run, no index): the constraints hold the installed torch
    and nothing but the package itself would be installed."""
    import torch

    from pytest_fsdpcheck.known import history

    version = torch.__version__.split("+")[0]
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(history.pinned(version)) + "\n")
    pytest.importorskip("transformers", reason="the models extra (transformers) is not installed")
    _, step = history.install_commands(pathlib.Path(sys.executable), version, wheel, constraints)
    report = tmp_path / "report.json"
    proc = subprocess.run([*step[:4], "--dry-run", "--no-index", "--report", str(report), *step[4:]],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    names = [entry["metadata"]["name"] for entry in json.loads(report.read_text())["install"]]
    assert names == ["pytest-fsdpcheck"], names
