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


def _tracked_copy(dest: pathlib.Path) -> pathlib.Path:
    # Build from a copy of the tracked files: an in-place build leaves build/
    # and *.egg-info behind in the checkout.
    files = _run(["git", "ls-files", "-z"], cwd=REPO).stdout.split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes((REPO / name).read_bytes())
    return dest


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, pathlib.Path]:
    """The sdist and wheel as published: ``python -m build`` builds the sdist
    from the tree, then the wheel from the sdist alone (so the wheel has
    only what the sdist carries), without build isolation (no download)."""
    tmp = tmp_path_factory.mktemp("dists")
    src = _tracked_copy(tmp / "src")
    dist = tmp / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)])
    (sdist,) = dist.glob("pytest_fsdpcheck-*.tar.gz")
    (built,) = dist.glob("pytest_fsdpcheck-*.whl")
    return {"sdist": sdist, "wheel": built, "src": src}


@pytest.fixture(scope="module")
def wheel(dists) -> pathlib.Path:
    return dists["wheel"]


def test_sdist_and_wheel_pass_twine_check(dists):
    proc = _run([sys.executable, "-m", "twine", "check", "--strict", str(dists["sdist"]), str(dists["wheel"])])
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def test_the_wheel_built_from_the_sdist_is_the_wheel_built_from_the_tree(dists, tmp_path):
    """Nothing the wheel needs (the suite's conformance/ and fixtures/, the
    report's schema, the reproducers) is left out of the sdist: a wheel made
    from the sdist alone holds exactly the files of one made from the tree."""
    import tarfile

    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path),
          str(dists["src"])])
    (from_tree,) = tmp_path.glob("pytest_fsdpcheck-*.whl")
    from_sdist = set(zipfile.ZipFile(dists["wheel"]).namelist())
    assert from_sdist == set(zipfile.ZipFile(from_tree).namelist()), sorted(
        from_sdist ^ set(zipfile.ZipFile(from_tree).namelist()))
    with tarfile.open(dists["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    tracked = set(filter(None, _run(["git", "ls-files", "-z"], cwd=REPO).stdout.split("\0")))
    shipped = {n for n in tracked if n.startswith(("conformance/", "fixtures/", "pytest_fsdpcheck/"))
               and (REPO / n).is_file() and not n.endswith((".pyc", ".md"))}
    assert shipped - names == set(), sorted(shipped - names)
    assert {"pyproject.toml", "README.md"} <= names


def test_wheel_ships_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"pytest_fsdpcheck", next(t for t in top if t.endswith(".dist-info"))}, sorted(top)
    assert "pytest_fsdpcheck/conformance/test_traversal.py" in names
    assert "pytest_fsdpcheck/fixtures/golden/mlp_chain.txt" in names
    # the known-bug reproducers are scripts whose names are bug ids
    assert "pytest_fsdpcheck/known/reproducers/spl-param-counted-per-use.py" in names
    # the JSON report's published schema (pytest_fsdpcheck.report.schema() reads it)
    assert "pytest_fsdpcheck/report/report.schema.json" in names
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
    code = "import pytest_fsdpcheck.plugin as p, pytest_fsdpcheck.plugin.collection as c; print(p.__file__); print(c.conformance_dir())"
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

    # the whole suite collects from the wheel as from the checkout, test for test
    collect = ["-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "--fsdpcheck", "--collect-only", "-q",
               "--fsdpcheck-impl", "reference"]
    installed = subprocess.run([str(python), *collect], cwd=empty, env=env, capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    checkout = _run([sys.executable, *collect], cwd=empty, env=env)
    ids = [line for line in installed.stdout.splitlines() if "::" in line]
    assert len(ids) > 100 and ids == [line for line in checkout.stdout.splitlines() if "::" in line], installed.stdout[-2000:]


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
    from pytest_fsdpcheck.commands import history

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

    from pytest_fsdpcheck.commands import history

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
