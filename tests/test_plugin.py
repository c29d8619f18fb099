"""Self-tests of the pytest plugin: options, usage errors, the idle plugin,
reporting, pytest-xdist parity and declared divergences.

A run that ends at a usage error, or prints the help, runs in this process
(``run_in_process``, tests/conftest.py); one that collects or runs the suite
goes through a subprocess: the plugin's run state is still module-global.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from pytest_fsdpcheck.report.verdict import EXIT_ENVIRONMENT, EXIT_STRICT

pytestmark = pytest.mark.plugin

REPO = pathlib.Path(__file__).resolve().parents[1]

TRAVERSAL_ONLY = """
from pytest_fsdpcheck.reference.traversal import ReferenceTraversal


class TraversalOnly:
    traversal = ReferenceTraversal()
"""


@pytest.fixture
def suite(pytester, monkeypatch):
    """``suite(*args)``: pytest in a subprocess in ``pytester.path``, with the
    repository importable (planted implementations live in ``tests.planted``)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("FSDPCHECK_IMPL", raising=False)

    def run(*args):
        return pytester.runpytest_subprocess("-p", "no:randomly", *args, timeout=600)

    return run


def _torch_facts() -> tuple[str, bool]:
    """torch's version and CUDA availability, asked of a fresh interpreter:
    this process stays free of torch (it runs many pytest subprocesses)."""
    code = "import torch; print(torch.__version__); print(torch.cuda.is_available())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return out[0], out[1] == "True"


def _report(pytester, name="report.json") -> dict:
    return json.loads((pytester.path / name).read_text())


def _outcomes(report: dict, impl: str) -> dict:
    return {inv: cell["outcome"] for inv, cell in report["matrix"][impl].items()}


# --- options ----------------------------------------------------------------------


def test_help_lists_every_option_and_ini_name(run_in_process):
    result = run_in_process("--help")
    out = result.stdout.str()
    for flag in (
        "--fsdpcheck",
        "--fsdpcheck-impl",
        "--fsdpcheck-device",
        "--fsdpcheck-profile",
        "--fsdpcheck-seed",
        "--fsdpcheck-divergences",
        "--fsdpcheck-report",
        "--fsdpcheck-strict",
    ):
        assert flag in out
    for ini in ("fsdpcheck_impl", "fsdpcheck_device", "fsdpcheck_profile", "fsdpcheck_divergences", "fsdpcheck_report", "fsdpcheck_strict"):
        assert f"{ini} (" in out or f"{ini}:" in out or f"\n  {ini} " in out, ini
    assert "FSDPCHECK_IMPL" in out


def test_ini_equivalents_of_the_options(pytester, suite):
    pytester.makeini(
        """
        [pytest]
        fsdpcheck = true
        fsdpcheck_impl = reference
        fsdpcheck_device = cpu
        fsdpcheck_profile = dev
        fsdpcheck_seed = 1234
        fsdpcheck_report = from-ini.json
        """
    )
    result = suite("-k", "test_handles")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "fsdpcheck: torch *; devices: cpu; profile: dev; seed: 1234 (replay with --fsdpcheck-seed=1234)",
            "fsdpcheck: implementations (areas provided):",
            "  reference: traversal, annotation*",
        ]
    )
    header = _report(pytester, "from-ini.json")["header"]
    assert header["implementations"] == ["reference"]
    assert (header["devices"], header["profile"], header["seed"]) == (["cpu"], "dev", 1234)


def test_command_line_overrides_ini(pytester, suite):
    pytester.makeini(
        """
        [pytest]
        fsdpcheck_impl = torch
        fsdpcheck_profile = dev
        """
    )
    pytester.makepyfile(trav_only=TRAVERSAL_ONLY)
    result = suite(
        "--fsdpcheck", "--fsdpcheck-impl", "trav_only:TraversalOnly", "--fsdpcheck-profile", "ci",
        "--fsdpcheck-report", "report.json", "-k", "test_handles",
    )
    assert result.ret == 0, result.stdout.str()
    header = _report(pytester)["header"]
    assert header["implementations"] == ["trav_only:TraversalOnly"]
    assert (header["profile"], header["seed"]) == ("ci", None)
    result.stdout.fnmatch_lines(["*profile: ci; seed: derandomized (ci profile)"])


def test_environment_variable_names_implementations(pytester, suite, monkeypatch):
    pytester.makepyfile(trav_only=TRAVERSAL_ONLY)
    monkeypatch.setenv("FSDPCHECK_IMPL", "reference, trav_only:TraversalOnly")
    result = suite("--fsdpcheck", "--fsdpcheck-report", "report.json", "-k", "test_handles")
    assert result.ret == 0, result.stdout.str()
    assert _report(pytester)["header"]["implementations"] == ["reference", "trav_only:TraversalOnly"]


# --- usage errors -------------------------------------------------------------------

BROKEN_IMPORT = "raise ImportError('planted: this module cannot be imported')\n"
NO_AREA = "class Nothing:\n    pass\n"


@pytest.mark.parametrize(
    "args, ini, files, says",
    [
        (["--fsdpcheck-profile=bogus"], None, {}, "bogus"),
        (["--fsdpcheck-device=tpu"], None, {}, "tpu"),
        (["--fsdpcheck-impl", "no-such-impl"], None, {}, "unknown implementation 'no-such-impl'"),
        (["--fsdpcheck-impl", "broken_impl:Impl"], None, {"broken_impl": BROKEN_IMPORT}, "cannot import 'broken_impl'"),
        (["--fsdpcheck-impl", "no_area:Nothing"], None, {"no_area": NO_AREA}, "provides none of the areas"),
        (["--fsdpcheck-impl", "no_area:Missing"], None, {"no_area": NO_AREA}, "has no attribute 'Missing'"),
        (["--fsdpcheck-divergences", "div.toml"], None, {"div.toml": "[[divergence]]\nmatch = 'TRV-1'\n"}, "needs a 'reason'"),
        (["--fsdpcheck-divergences", "div.toml"], None, {"div.toml": "this is = = not toml"}, "not valid TOML"),
        (["--fsdpcheck-divergences", "div.toml"], None, {"div.toml": "[[divergence]]\nmatch = 'TRV-99'\nreason = 'x'\n"}, "unknown invariant 'TRV-99'"),
        (["--fsdpcheck-divergences", "missing.toml"], None, {}, "cannot read"),
        (["--fsdpcheck-divergences", "div.toml"], None, {"div.toml": "[[divergence]]\nmatch = 'TRV-1'\nreason = 'x'\ntorch = 'two point four'\n"}, "must be a version range"),
        (["--fsdpcheck-profile=dev", "--fsdpcheck-seed=abc"], None, {}, "must be an integer"),
        ([], "fsdpcheck_profile = bogus", {}, "unknown profile 'bogus'"),
        ([], "fsdpcheck_device = tpu", {}, "unknown device 'tpu'"),
        ([], "fsdpcheck_impl = no-such-impl", {}, "unknown implementation 'no-such-impl'"),
    ],
    ids=[
        "profile", "device", "unknown-impl", "import-fails", "no-area", "no-attr", "div-no-reason",
        "div-not-toml", "div-unknown-id", "div-missing-file", "div-bad-torch-range", "seed", "ini-profile", "ini-device", "ini-impl",
    ],
)
def test_bad_setting_is_a_one_line_usage_error(pytester, run_in_process, args, ini, files, says):
    for name, text in files.items():
        (pytester.path / (name if "." in name else name + ".py")).write_text(text)
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    result = run_in_process("--fsdpcheck", *args)
    output = result.outlines + result.errlines
    assert result.ret == pytest.ExitCode.USAGE_ERROR, "\n".join(output)
    assert not any("Traceback" in line for line in output), "\n".join(output)
    saying = [line for line in output if says in line]
    assert len(saying) == 1, "\n".join(output)
    assert saying[0].startswith("ERROR:") or ": error: argument" in saying[0]


def test_bad_implementation_from_environment_is_a_usage_error(run_in_process, monkeypatch):
    monkeypatch.setenv("FSDPCHECK_IMPL", "no-such-impl")
    result = run_in_process("--fsdpcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: fsdpcheck: unknown implementation 'no-such-impl'*"])


def test_a_limit_too_small_for_any_call_is_one_line_per_test(pytester, suite):
    """``--fsdpcheck-timeout 1e-7`` is a valid limit no call can keep: each
    test fails with the one-line timeout naming it, never a RecursionError
    from the limit's own watchdog (issue 56: an exception group of them)."""
    result = suite("--fsdpcheck", "--fsdpcheck-impl", "reference", "--fsdpcheck-timeout", "1e-7",
                   "-k", "test_states_with_modules", "--fsdpcheck-report", "report.json")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    assert "RecursionError" not in out and "Exception Group" not in out and "Traceback" not in out, out
    # the first call Hypothesis' first example makes: states_with_modules, or new_state where it builds states
    result.stdout.fnmatch_lines(["ImplementationTimeout: reference: traversal.* did not return "
                                 "within 1e-07 s (per-call limit; --fsdpcheck-timeout to change)"])
    assert _outcomes(_report(pytester), "reference")["TRV-1"] == "fail"


def test_cuda_without_cuda_is_an_environment_error(run_in_process):
    """A missing device is the machine's (a CI retries it), not a usage error."""
    import torch  # imported here anyway: the run in this process loads the implementations

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    result = run_in_process("--fsdpcheck", "--fsdpcheck-impl", "reference", "--fsdpcheck-device=cuda")
    assert result.ret == EXIT_ENVIRONMENT
    result.stderr.fnmatch_lines(["Exit: fsdpcheck: --fsdpcheck-device=cuda but torch sees no CUDA device (environment ERROR*"])
    assert "Traceback" not in result.stderr.str()


# --- the idle plugin -----------------------------------------------------------------

IDLE_CONFTEST = """
import sys


def pytest_sessionfinish(session):
    loaded = sorted(m for m in ("torch", "pytest_fsdpcheck.plugin", "pytest_fsdpcheck.contract") if m in sys.modules)
    print("\\nLOADED=" + ",".join(loaded))
"""


@pytest.mark.process
@pytest.mark.parametrize("mode", [["--collect-only"], []], ids=["collect-only", "run"])
def test_idle_plugin_imports_no_torch_and_writes_nothing(pytester, mode, monkeypatch, tmp_path_factory):
    from tests.helpers import OthersWrites

    pytester.makeconftest(IDLE_CONFTEST)
    pytester.makepyfile(test_tiny="def test_one():\n    assert 1 + 1 == 2\n")
    before = sorted(p.relative_to(pytester.path) for p in pytester.path.rglob("*"))
    others = OthersWrites(monkeypatch, tmp_path_factory.mktemp("outside"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FSDPCHECK", "PYTEST_ADDOPTS"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *others.args, "-s", *mode],
        cwd=pytester.path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The plugin was loaded (so the check means something) but stayed idle.
    assert "LOADED=pytest_fsdpcheck.plugin" in proc.stdout.splitlines(), proc.stdout
    assert not any(line.startswith("fsdpcheck") for line in proc.stdout.splitlines()), proc.stdout
    after = sorted(p.relative_to(pytester.path) for p in pytester.path.rglob("*") if p.relative_to(pytester.path).parts[0] not in others.names())
    assert after == before


# --- reporting -----------------------------------------------------------------------


def test_missing_area_is_not_provided_never_pass(pytester, suite):
    pytester.makepyfile(trav_only=TRAVERSAL_ONLY)
    result = suite(
        "--fsdpcheck", "--fsdpcheck-impl", "trav_only:TraversalOnly", "--fsdpcheck-report", "report.json",
        "-k", "test_handles or test_annotation",
    )
    assert result.ret == 0, result.stdout.str()
    cells = _outcomes(_report(pytester), "trav_only:TraversalOnly")
    annotation = {inv: out for inv, out in cells.items() if inv.startswith("ANN")}
    assert sorted(annotation) == [f"ANN-{n}" for n in range(1, 9)]
    assert set(annotation.values()) == {"not provided"}
    assert cells["TRV-6"] == "pass"
    result.stdout.fnmatch_lines(["TRV-6 * pass *", "ANN-1 * n/p *", "ANN-7 * n/p *"])
    result.stdout.fnmatch_lines(["*trav_only:TraversalOnly: traversal"])


def _reproducer_reproduces(result, spec, invariant):
    """The snippet printed with a failure names the implementation it was
    loaded as, and run on its own it fails on the same invariant."""
    from tests.helpers import printed_reproducers

    code = printed_reproducers(result.outlines)[0]

    assert f"impl = load_implementation({spec!r})" in code, code
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=os.environ)
    assert proc.returncode == 1 and "AssertionError" in proc.stderr, code + proc.stderr
    assert f"Violation(invariant='{invariant}'" in proc.stderr, proc.stderr


def test_json_report_has_header_and_matrix(pytester, suite):
    result = suite(
        "--fsdpcheck", "--fsdpcheck-impl", "reference", "--fsdpcheck-impl", "tests.planted.traversal:UnfilteredRoots",
        "--fsdpcheck-report", "report.json", "-k", "test_root_states", "-p", "tests.planted.noshrink",
    )
    assert result.ret == 1
    report = _report(pytester)
    torch_version, has_cuda = _torch_facts()
    assert report["header"] == {
        "torch": torch_version,
        "implementations": ["reference", "tests.planted.traversal:UnfilteredRoots"],
        "devices": ["cpu", "cuda"] if has_cuda else ["cpu"],
        "profile": "ci",
        "seed": None,
        "divergence_files": [],
        "complete": True,
        "world_size": None,
    }
    assert report["matrix"]["reference"] == {
        "TRV-7": {"outcome": "pass", "tests": 1},
        "TRV-9": {"outcome": "pass", "tests": 1},
    }
    assert _outcomes(report, "tests.planted.traversal:UnfilteredRoots") == {"TRV-7": "fail", "TRV-9": "pass"}
    assert report["stale_divergences"] == [] and report["unexpected_passes"] == []
    _reproducer_reproduces(result, "tests.planted.traversal:UnfilteredRoots", "TRV-7")
    result.stdout.fnmatch_lines(
        [
            f"fsdpcheck: torch {torch_version}; devices: *; profile: ci; seed: derandomized (ci profile)",
            "*fsdpcheck conformance matrix*",
            "invariant  reference * tests.planted.traversal:UnfilteredRoots *",
            "TRV-7      pass * FAIL *",
        ]
    )


@pytest.mark.process
@pytest.mark.fresh_interpreter  # the controller must not import torch: a fork of one that has cannot show it
def test_xdist_gives_the_serial_matrix(pytester, suite, monkeypatch):
    """The same matrix and header; the controller, which runs no test, never
    imports torch or an implementation (issue 29 item 4: that import, before
    any worker starts, made -n 2 fail later than serial), and prints the
    header its workers' loading completes with the matrix."""
    common = [
        "--fsdpcheck", "--fsdpcheck-impl", "reference", "--fsdpcheck-impl", "tests.planted.traversal:LastOwner",
        "--fsdpcheck-impl", "tests.planted.annotation:TogglesFlag", "-p", "tests.planted.noshrink",
        "-p", "tests.planted.controller_imports",
        "-k", "test_states_with_modules or test_idempotent or test_handles",
    ]
    monkeypatch.setenv("FSDPCHECK_TEST_IMPORTS", str(pytester.path / "serial-imports.json"))
    serial = suite(*common, "--fsdpcheck-report", "serial.json")
    monkeypatch.setenv("FSDPCHECK_TEST_IMPORTS", str(pytester.path / "parallel-imports.json"))
    parallel = suite(*common, "-n", "2", "--fsdpcheck-report", "parallel.json")
    assert serial.ret == parallel.ret == 1
    assert "2 workers" in parallel.stdout.str() or "gw1" in parallel.stdout.str()
    serial_report, parallel_report = _report(pytester, "serial.json"), _report(pytester, "parallel.json")
    assert parallel_report["matrix"] == serial_report["matrix"]
    assert parallel_report["header"] == serial_report["header"]
    # not vacuous: the serial run imports them all
    assert _report(pytester, "serial-imports.json") == dict.fromkeys(_report(pytester, "serial-imports.json"), True)
    assert _report(pytester, "parallel-imports.json") == dict.fromkeys(_report(pytester, "serial-imports.json"), False)
    parallel.stdout.fnmatch_lines([
        "*fsdpcheck conformance matrix*",
        "fsdpcheck: torch *; devices: cpu*; profile: ci; *",
        "fsdpcheck: implementations (areas provided):",
        "  tests.planted.traversal:LastOwner: traversal",
        "  tests.planted.annotation:TogglesFlag: annotation",
        "invariant  reference *",
    ])
    # Not vacuous: the matrix holds passes, failures and not-provided cells.
    outcomes = {c["outcome"] for cells in serial_report["matrix"].values() for c in cells.values()}
    assert {"pass", "fail", "not provided"} <= outcomes


@pytest.mark.process
def test_xdist_worker_load_error_is_one_line(suite):
    """An implementation only a worker can find broken (the controller checks
    that its module exists, not what the module holds): one line, the usage
    error's exit status, no worker traceback."""
    missing = "tests.planted.traversal:NoSuchImplementation"
    result = suite("--fsdpcheck", "--fsdpcheck-impl", missing, "-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stdout.fnmatch_lines([f"*fsdpcheck: implementation '{missing}': 'tests.planted.traversal' has no attribute*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    nowhere = suite("--fsdpcheck", "--fsdpcheck-impl", "tests.planted.no_such_module:Impl", "-n", "2")
    assert nowhere.ret == pytest.ExitCode.USAGE_ERROR
    nowhere.stderr.fnmatch_lines(["*fsdpcheck: implementation 'tests.planted.no_such_module:Impl': cannot import*"])
    assert "created: 2/2 workers" not in nowhere.stdout.str()  # the controller refused it before any worker started


# --- declared divergences ----------------------------------------------------------

UNFILTERED = "tests.planted.traversal:UnfilteredRoots"
DIVERGENCES = f"""
[[divergence]]
match = "TRV-7"
implementation = "{UNFILTERED}"
reason = "planted: root states are not filtered"

[[divergence]]
match = "TRV-6"
implementation = "{UNFILTERED}"
reason = "declared, but its handles are right: an unexpected pass"

[[divergence]]
match = "test_traversal.py::test_no_such_test[{UNFILTERED}]"
implementation = "{UNFILTERED}"
reason = "matches nothing: stale"

[[divergence]]
match = "TRV-1"
implementation = "torch"
reason = "torch is not under test: neither stale nor an unexpected pass"
"""


# every test tagged TRV-6 or TRV-7 runs (a deselected one would withhold the
# verdicts); the large trees and the growth timings check TRV-8 only
EVERY_TRV_6_7 = "(test_traversal or test_golden_traversal) and not test_large_trees and not test_linear_growth"


def _divergence_run(pytester, suite, *extra, divergences_option=True, k=EVERY_TRV_6_7):
    (pytester.path / "div.toml").write_text(DIVERGENCES)
    option = ["--fsdpcheck-divergences", "div.toml"] if divergences_option else []
    return suite(
        "--fsdpcheck", "--fsdpcheck-impl", UNFILTERED, *option,
        "--fsdpcheck-report", "report.json", "-k", k,
        "-p", "tests.planted.noshrink", "-rx", *extra,
    )


def _no_failures_some_xfailed(result):
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("xfailed", 0) >= 1, outcomes


def test_declared_divergence_turns_failure_into_xfail(pytester, suite):
    result = _divergence_run(pytester, suite)
    assert result.ret == 0, result.stdout.str()
    _no_failures_some_xfailed(result)
    report = _report(pytester)
    cells = _outcomes(report, UNFILTERED)
    assert cells["TRV-7"] == "divergence"
    assert cells["TRV-6"] == "unexpected pass"
    assert report["header"]["divergence_files"] == ["div.toml"]
    result.stdout.fnmatch_lines(
        [
            "TRV-6 * XPASS *",
            "TRV-7 * declared *",
            "stale divergence (div.toml entry 3): test_traversal.py::test_no_such_test* matched no test",
            f"unexpected pass: TRV-6 is declared divergent for {UNFILTERED} but all its checks passed",
            "XFAIL *test_root_states*declared divergence: TRV-7: planted: root states are not filtered",
        ]
    )
    assert report["stale_divergences"] == [
        {"match": f"test_traversal.py::test_no_such_test[{UNFILTERED}]", "implementation": UNFILTERED}
    ]
    assert report["unexpected_passes"] == [{"invariant": "TRV-6", "implementation": UNFILTERED}]


@pytest.mark.process
def test_divergence_findings_are_the_same_under_xdist(pytester, suite):
    serial = _divergence_run(pytester, suite)
    serial_report = _report(pytester)
    parallel = _divergence_run(pytester, suite, "-n", "2")
    parallel_report = _report(pytester)
    assert serial.ret == parallel.ret == 0
    for key in ("matrix", "stale_divergences", "unexpected_passes"):
        assert parallel_report[key] == serial_report[key], key
    assert len(serial_report["stale_divergences"]) == len(serial_report["unexpected_passes"]) == 1


def test_strict_fails_on_stale_entries_and_unexpected_passes(pytester, suite):
    result = _divergence_run(pytester, suite, "--fsdpcheck-strict")
    assert result.ret == EXIT_STRICT, result.stdout.str()  # strict findings' own status, not a FAIL's
    _no_failures_some_xfailed(result)


def test_deselected_tests_make_no_unexpected_pass(pytester, suite):
    """-k that leaves out some TRV-6 tests: the ones that ran passed, but the
    invariant is not judged fixed (issue: 'TRV-7 XPASS' after -k)."""
    _divergence_run(pytester, suite, k="test_root_states or test_handles")
    assert _report(pytester)["unexpected_passes"] == []
    assert _outcomes(_report(pytester), UNFILTERED)["TRV-6"] == "pass"


def test_divergences_and_strict_from_ini(pytester, suite):
    pytester.makeini("[pytest]\nfsdpcheck_divergences = div.toml\nfsdpcheck_strict = true\n")
    result = _divergence_run(pytester, suite, divergences_option=False)
    assert result.ret == EXIT_STRICT, result.stdout.str()
    _no_failures_some_xfailed(result)
    # a path from the ini file is relative to the ini file's folder
    assert _report(pytester)["header"]["divergence_files"] == [str(pytester.path / "div.toml")]


def test_divergence_outside_its_torch_range_declares_nothing(pytester, suite):
    (pytester.path / "div.toml").write_text(
        f'[[divergence]]\nmatch = "TRV-7"\nimplementation = "{UNFILTERED}"\ntorch = "<2.0"\nreason = "only on torch 1.x"\n'
    )
    result = suite(
        "--fsdpcheck", "--fsdpcheck-impl", UNFILTERED, "--fsdpcheck-divergences", "div.toml",
        "--fsdpcheck-report", "report.json", "-k", "test_root_states", "-p", "tests.planted.noshrink",
    )
    assert result.ret == 1
    assert _outcomes(_report(pytester), UNFILTERED)["TRV-7"] == "fail"


def test_undeclared_failure_still_fails_with_divergences_loaded(pytester, suite):
    (pytester.path / "div.toml").write_text(
        '[[divergence]]\nmatch = "TRV-6"\nimplementation = "' + UNFILTERED + '"\nreason = "unrelated"\n'
    )
    result = suite(
        "--fsdpcheck", "--fsdpcheck-impl", UNFILTERED, "--fsdpcheck-divergences", "div.toml",
        "--fsdpcheck-report", "report.json", "-k", "test_root_states", "-p", "tests.planted.noshrink",
    )
    assert result.ret == 1
    assert _outcomes(_report(pytester), UNFILTERED)["TRV-7"] == "fail"


@pytest.mark.unit
def test_corpus_tests_of_one_model_are_made_adjacent_and_nothing_else_moves():
    """xdist hands out consecutive items, so grouping a corpus model's tests
    keeps its build on one worker; a user's items (even in a file of the
    same name) keep their places."""
    from types import SimpleNamespace

    from pytest_fsdpcheck.plugin.collection import conformance_dir
    from pytest_fsdpcheck.plugin.collection import group_by_corpus_model as _group_by_corpus_model

    def item(path, fn, model):
        return SimpleNamespace(path=path, nodeid=f"{path.name}::{fn}[{model}]", callspec=SimpleNamespace(params={"model": model}))

    suite = pathlib.Path(conformance_dir()) / "test_golden.py"
    mine = pathlib.Path("/project/tests/test_golden.py")
    items = [item(suite, "buckets", "a"), item(suite, "buckets", "b"), item(mine, "mine", "a"),
             item(suite, "traversal", "a"), item(suite, "traversal", "b"), item(mine, "mine", "b")]
    _group_by_corpus_model(items)
    assert [(i.path, i.nodeid.partition("::")[2]) for i in items] == [
        (suite, "buckets[a]"), (suite, "traversal[a]"), (mine, "mine[a]"),
        (suite, "buckets[b]"), (suite, "traversal[b]"), (mine, "mine[b]"),
    ]
