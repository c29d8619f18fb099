from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

#: The tiers of the project's own tests, cheapest first (pyproject.toml
#: registers them; README and DESIGN.md say what each holds).
TIERS = ("unit", "kill", "plugin", "process", "e2e", "gpu")
_HERE = Path(__file__).resolve().parent


def _tiers_on(node) -> list[str]:
    return [mark.name for mark in node.own_markers if mark.name in TIERS]


def pytest_configure(config):
    """Inner ``pytester.runpytest_subprocess`` runs fork from a process that
    has imported torch (tests/preloaded.py) unless the test is marked
    ``fresh_interpreter`` or the run's environment changes what torch reads
    as it imports; FSDPCHECK_TESTS_SUBPROCESS=1 turns it off."""
    import os
    import sys

    # Python's default, where the environment turned it off (this project's
    # machines set PYTHONDONTWRITEBYTECODE=1): every process these tests
    # start (xdist workers, inner pytest runs, spawned ranks) would compile
    # the package, the suite and the tests from source again, and pytest
    # rewrite their asserts again, about a second of CPU per process. The
    # cache is the gitignored __pycache__ beside the sources. Before the
    # zygote and the xdist workers start, so they inherit it.
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        sys.dont_write_bytecode = False
    if os.environ.get("FSDPCHECK_TESTS_SUBPROCESS") != "1":
        from tests.preloaded import install

        config.add_cleanup(install())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every test of this folder has exactly one tier: its module's
    ``pytestmark``, or the test's own mark where it costs more than its
    module's tier. The nearest mark wins and is the only one pytest's ``-m``
    sees (tryfirst: before ``-m`` deselects), so ``-m unit`` never selects a
    module's e2e test. A test without a tier, or with two of its own, is a
    usage error: a new test cannot be left out of the tiers."""
    wrong, parents = [], set()
    for item in items:
        if not Path(item.path).resolve().is_relative_to(_HERE):
            continue  # an inner run's own tests (pytester), not the project's
        chain = list(item.iter_parents()) if hasattr(item, "iter_parents") else item.listchain()[::-1]
        nearest = next((tiers for node in chain if (tiers := _tiers_on(node))), [])
        if len(set(nearest)) != 1:
            wrong.append(f"{item.nodeid}: {' and '.join(sorted(set(nearest))) or 'no tier'}")
            continue
        if not _tiers_on(item):
            item.add_marker(nearest[0])
        parents.update(node for node in chain[1:] if _tiers_on(node))
    if wrong:
        raise pytest.UsageError(
            f"tests need exactly one tier mark ({', '.join(TIERS)}; tests/conftest.py): " + "; ".join(wrong[:10])
            + (f" (and {len(wrong) - 10} more)" if len(wrong) > 10 else ""))
    for node in parents:  # the items carry their tier now
        node.own_markers[:] = [mark for mark in node.own_markers if mark.name not in TIERS]


def schema_errors(folders) -> list[str]:
    """Why each JSON report (a ``.json`` file holding ``schema_version``)
    under ``folders`` does not match ``pytest_fsdpcheck/report/report.schema.json``."""
    import json
    from pathlib import Path

    import jsonschema

    from pytest_fsdpcheck.report.content import schema

    validator = jsonschema.Draft202012Validator(schema())
    errors = []
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and "schema_version" in data:
                errors += [f"{path}: {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}"
                           for e in validator.iter_errors(data)]
    return errors


@pytest.fixture(scope="session")
def run_script():
    """``run_script(script, cwd, env, timeout)``: ``python SCRIPT`` as
    ``subprocess.run(..., capture_output=True, text=True)`` gives it, forked
    from a process that ran ``import torch`` (tests/preloaded.py's ScriptRunner)."""
    from tests.preloaded import ScriptRunner

    runner = ScriptRunner()
    yield runner.run
    runner.close()


@pytest.fixture(scope="session")
def session_folder(tmp_path_factory):
    """A folder of this test session's, shared by its xdist workers (their
    base temps sit side by side in the controller's)."""
    import os

    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def _hypothesis_constants(session_folder):
    """One folder for Hypothesis' cache of the constants it mines from local
    source files, shared by every inner run of the session."""
    shared = session_folder / "hypothesis-constants"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture
def pytester(pytester, _hypothesis_constants):
    """pytester, with its folder's Hypothesis cache of mined constants linked
    to the session's. Hypothesis parses every local module's source for
    constants to draw, once per process, and keeps the result under
    ``.hypothesis/constants`` of the working directory, keyed by the
    source's hash and written atomically (as its own xdist workers share
    it): an inner run in a new folder parsed the package again, about a
    second of CPU each. The folder's example database stays its own."""
    cache = pytester.path / ".hypothesis"
    cache.mkdir(exist_ok=True)
    (cache / "constants").symlink_to(_hypothesis_constants, target_is_directory=True)
    return pytester


@pytest.fixture(autouse=True)
def _reports_match_the_schema(request):
    """Every JSON report a test's runs leave in its temporary folders
    matches the published schema (dashboards rely on it)."""
    yield
    funcargs = getattr(request.node, "funcargs", {})
    folders = [f for f in (getattr(funcargs.get("pytester"), "path", None), funcargs.get("tmp_path")) if f is not None]
    if not folders:
        return
    try:
        import jsonschema  # noqa: F401 - the test extra's; without it nothing is checked
    except ImportError:
        return
    errors = schema_errors(folders)
    if errors:
        pytest.fail("JSON report(s) not matching pytest_fsdpcheck/report/report.schema.json:\n" + "\n".join(errors[:20]),
                    pytrace=False)


@pytest.fixture(scope="session")
def _builtin_implementations_imported():
    """An in-process run forgets the modules it imported (pytester restores
    ``sys.modules``), and torch's C extension cannot be imported twice in one
    process: what loading the built-in implementations imports is imported
    here first, so it stays; so is what Hypothesis' plugin imports as every
    run ends (seconds, were it imported again by each run)."""
    import hypothesis.internal.observability  # noqa: F401

    from pytest_fsdpcheck.impls import load_implementation

    for spec in ("torch", "reference"):
        load_implementation(spec)


@pytest.fixture
def run_in_process(pytester, monkeypatch, _builtin_implementations_imported):
    """``run_in_process(*args)``: pytest in this process, in ``pytester.path``
    (``pytester.runpytest_inprocess``, milliseconds where a subprocess costs
    a torch import), for runs that end at a usage error or at start-up before
    any suite test runs. The folder's modules are importable and forgotten
    after the run; its run state is its own session's (``run_state``), so
    nothing needs putting back."""
    import importlib

    monkeypatch.delenv("FSDPCHECK_IMPL", raising=False)
    pytester.syspathinsert()

    def run(*args):
        importlib.invalidate_caches()
        return pytester.runpytest_inprocess("-p", "no:randomly", *args)

    return run


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
