"""Every printed reproducer runs: per conformance area, planted failures run
through the suite, and each failed test's "fsdpcheck reproducer" section,
pasted into a file and run from an unrelated directory, must fail the same
way — an AssertionError naming an invariant the test's failure named — not
a NameError, an ImportError or a pass."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import PLANTED_RUN, failure_sections, printed_reproducers

pytestmark = pytest.mark.e2e

REPO = Path(__file__).parent.parent
ID = re.compile(r"\b(?:TRV|ANN|SPL|EXO|FS2|PLN)-\d+\b")

#: area -> {planted implementation: -k expression of the tests it fails}; each
#: test named prints a reproducer, so every planted one must yield at least one
CASES = {
    "traversal": {
        "tests.planted.traversal:LastOwner": "test_states_with_modules",
        "tests.planted.traversal:HandlesPostOrder": "test_handles",
        "tests.planted.traversal:UnfilteredRoots": "test_root_states",
    },
    "annotation": {
        "tests.planted.annotation:ChildrenOnly": "test_annotate",
        "tests.planted.annotation:TogglesFlag": "test_idempotent",
        "tests.planted.annotation:LastPathWins": "test_shared_submodules",
    },
    # both graph forms for one; the dynamo form (the installed torch's own) for the rest
    "splitting": {
        "tests.planted.splitting:AcceptsBigFirstCap": "test_first_cap_above_cap_rejected and dynamo",
        "tests.planted.splitting:CountsFrozen": "test_split_plan",
        "tests.planted.splitting:CountsPerUse": "test_counted_once_cases and dynamo",
        "tests.planted.splitting:WrongOutputs": "test_compiled_split and dynamo",
        "tests.planted.splitting:HopCrash": "test_higher_order_ops and dynamo",
        "tests.planted.splitting:IgnoresFirstCap": "test_agrees_with_ddp_assignment and dynamo",
        "tests.planted.splitting_compiled:ContiguousExampleInputs": "test_split_cases and dynamo and non-contiguous",
        "tests.planted.splitting_compiled:CompilesWithoutGrad": "test_compile_context_cases and dynamo and first-cap",
        "tests.planted.splitting_compiled:HooksSeeCompile": "test_compile_hooks_cases and dynamo and first-cap",
        "tests.planted.splitting_compiled:ConfigsToOneBucketOnly": "test_compiler_configs_cases and dynamo and first-cap",
    },
    "exec order": {
        "tests.planted.exec_order:ReversedParamOrder": "test_exec_order and not subclasses and not restored "
                                                        "and not clean and not growth and not reference "
                                                        "and not real_forward and not keyword",
        "tests.planted.exec_order:BypassesSubclass": "test_tracer_subclasses",
        "tests.planted.exec_order:BufferProxiesAsParams": "test_real_forward_features",
    },
    "fsdp2": {
        "tests.planted.fsdp2:PreOrder": "test_managed_modules",
        "tests.planted.fsdp2:IgnoresOwnParamsOnly": "test_ignored_params",
        "tests.planted.fsdp2:KeepsIgnoredParams": "test_managed_states",
        "tests.planted.fsdp2:NoFlags": "test_fully_shard_flags",
        "tests.planted.fsdp2:NoConflictCheck": "test_fully_shard_conflicts",
    },
}


def _reproducers(lines) -> dict[str, tuple[str, set[str]]]:
    """Failed test id -> (its reproducer, the invariant IDs its failure names)."""
    found = {}
    for name, text in failure_sections(lines).items():
        snippets = printed_reproducers(text.splitlines())
        if snippets:
            body = text.split("fsdpcheck reproducer", 1)[0]
            found[name] = (snippets[0], set(ID.findall(body)))
    return found


def _env() -> dict:
    # From an unrelated directory, as a user would: only the repo (for the
    # planted implementation's module) is importable.
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _run(script: Path):
    return subprocess.run([sys.executable, str(script)], cwd=script.parent, env=_env(), capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("area", list(CASES))
def test_every_printed_reproducer_reproduces(run_suite, run_script, tmp_path, area):
    planted = CASES[area]
    k = " or ".join(f"({spec.rpartition(':')[2]} and ({tests}))" for spec, tests in planted.items())
    result, report = run_suite(*planted, k=k, extra=("-p", "no:xdist", *PLANTED_RUN))
    assert report is not None, result.stdout.str()[-3000:]
    reproducers = _reproducers(result.outlines)
    problems = [f"{spec}: no failed test printed a reproducer" for spec in planted
                if not any(f"[{spec}" in name for name in reproducers)]
    for n, (name, (snippet, ids)) in enumerate(sorted(reproducers.items())):
        assert ids, f"{name}: its failure names no invariant"
        script = tmp_path / f"repro{n}.py"
        script.write_text(snippet)
        proc = run_script(script, cwd=script.parent, env=_env())
        out = proc.stdout + proc.stderr
        if proc.returncode == 0:
            problems.append(f"{name}: its reproducer passes\n{snippet}")
        elif "AssertionError" not in proc.stderr or not ids & set(ID.findall(out)):
            problems.append(f"{name}: expected an AssertionError naming one of {sorted(ids)}, got:\n"
                            f"{snippet}\n{out[-2000:]}")
    assert not problems, "\n\n".join(problems)


def test_a_models_fs2_9_reproducer_runs_its_spawned_ranks(tmp_path, monkeypatch):
    """FS2-9's ranks are spawned and re-import the script: unguarded, each
    rank ran the check again and died ("rank 0 failed: died without a
    result") even for a plan that passes. The printed script, run as a user
    runs it, passes for the planted good plan."""
    from pytest_fsdpcheck.cases import build_case, load_factory
    from pytest_fsdpcheck.cases.checks import reproducer

    # Dynamo and AOTAutograd without Inductor's C++ builds in each rank
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    case = build_case(load_factory("tests.planted.plans:good"))
    script = tmp_path / "repro_fs2_9.py"
    script.write_text(reproducer(case, "check_plan_end_to_end", None))
    proc = _run(script)
    assert proc.returncode == 0, script.read_text() + "\n" + (proc.stdout + proc.stderr)[-3000:]
