"""The suite collects from an installed wheel, from any directory."""

from __future__ import annotations

import os
import pathlib
import site
import subprocess
import sys
import zipfile

import pytest

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
    assert not any(n.startswith(("conformance/", "fixtures/", "tests/")) for n in names)


def test_suite_runs_from_installed_wheel(wheel, tmp_path):
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
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FSDPCHECK_IMPL", "PYTEST_ADDOPTS")}
    code = "import pytest_fsdpcheck.plugin as p, pytest_fsdpcheck.collection as c; print(p.__file__); print(c.conformance_dir())"
    where = _run([str(python), "-c", code], cwd=empty, env=env).stdout.split()
    assert all(pathlib.Path(w).is_relative_to(inner_site) for w in where), where

    proc = subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "--fsdpcheck", "-k", "test_states_with_modules",
         "--fsdpcheck-impl", "reference"],
        cwd=empty, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout, proc.stdout
    assert "test_traversal.py ." in proc.stdout, proc.stdout
    assert list(empty.iterdir()) == []
