import pytest

pytest_plugins = ["pytester"]


@pytest.fixture
def run_suite(pytester):
    """Run the conformance suite in a subprocess against ``impls``.

    Returns ``(result, report)``: pytester's RunResult and the parsed JSON
    report (matrix: impl -> invariant -> {outcome, tests}).
    """
    import json
    import os
    import pathlib

    tests_dir = pathlib.Path(__file__).parent

    def run(*impls, k=None, extra=()):
        report = pytester.path / "report.json"
        args = ["--fsdpcheck", "-p", "no:randomly", "-rf", "--fsdpcheck-report", str(report)]
        for impl in impls:
            args += ["--fsdpcheck-impl", impl]
        if k:
            args += ["-k", k]
        env_path = os.pathsep.join([str(tests_dir.parent), os.environ.get("PYTHONPATH", "")])
        pytester._monkeypatch.setenv("PYTHONPATH", env_path)
        result = pytester.runpytest_subprocess(*args, *extra, timeout=900)
        data = json.loads(report.read_text()) if report.exists() else None
        return result, data

    return run
