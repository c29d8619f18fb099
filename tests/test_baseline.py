"""A baseline that expires: --fsdpcheck-write-baseline records today's FAIL
cells (one divergence entry per test and invariant), --fsdpcheck-baseline
holds them, and a run with it fails on a new FAIL, on an entry that no longer
fails, and on one whose ``until`` torch release is installed.

The entries are the divergence file's, so most of it is checked in-process
on the pure functions of ``known.divergences`` and on ``verdicts.findings``;
one suite run round-trips a written file. The killer through torch's column
(a failure outside the baseline is still torch's FAIL) is
``tests/test_excuses.py::test_a_torch_bug_outside_the_baseline_fails``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_fsdpcheck.known import divergences as div
from pytest_fsdpcheck.known.divergences import tomllib

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
IMPL = "tests.planted.traversal:UnfilteredRoots"
ROOTS = f"test_traversal.py::test_root_states[{IMPL}]"
WALK = f"test_traversal.py::test_states_with_modules[{IMPL}]"


def _load(tmp_path, text: str, baseline: bool = True) -> list[div.Divergence]:
    path = tmp_path / "baseline.toml"
    path.write_text(text, encoding="utf-8")
    return div.load(path, baseline=baseline)


def test_a_written_baseline_reads_back_one_narrow_entry_per_test_and_invariant(tmp_path):
    odd = 'test_x.py::test_y[a "quoted" \\ id]'
    failures = [
        ("conformance/test_traversal.py::test_root_states[torch]", "torch", ["TRV-7", "TRV-1"], None),
        ("conformance/test_traversal.py::test_root_states[torch]", "torch", ["TRV-7"], None),  # the same again
        (odd, "mine", None, None),  # a failure that named no invariant: its test id
    ]
    text = div.baseline_text(failures, "2.13.0+cpu")
    assert text == div.baseline_text(list(reversed(failures)), "2.13.0+cpu"), "the file depends on the order met"
    entries = _load(tmp_path, text)
    assert [(e.match, e.test, e.implementation, e.baseline) for e in entries] == [
        ("TRV-1", "conformance/test_traversal.py::test_root_states[torch]", "torch", True),
        ("TRV-7", "conformance/test_traversal.py::test_root_states[torch]", "torch", True),
        (odd, "", "mine", True),
    ]
    assert all(e.narrow and not e.until for e in entries)


def test_an_entry_narrowed_to_a_test_covers_that_test_only(tmp_path):
    (entry,) = _load(tmp_path, f'[[divergence]]\nmatch = "TRV-7"\ntest = "{ROOTS}"\nreason = "r"\n')
    assert div.declared_reason([entry], IMPL, "conformance/" + ROOTS, ["TRV-7"]) == "TRV-7: r"
    # the same invariant in another test of the cell, another implementation's cell, another invariant
    assert div.declared_reason([entry], IMPL, "conformance/" + WALK, ["TRV-7"]) is None
    assert div.declared_reason([entry], IMPL, "conformance/" + ROOTS, ["TRV-7", "TRV-1"]) is None
    assert div.matching([entry], IMPL, "conformance/" + WALK, ["TRV-7"]) == []
    assert div.matching([entry], IMPL, "conformance/" + ROOTS, ["TRV-7", "TRV-9"]) == [entry]
    wide = div.Divergence("TRV-7", "wide", "*", "x")
    assert div.excusing([entry, wide], IMPL, "conformance/" + ROOTS, ["TRV-7"]) == [entry, wide]


def test_an_entry_keyed_by_an_example_covers_that_failure_only(tmp_path):
    signature = div.example_signature("the walk gave m3 twice, at 0x7f3a and 12 calls in 0.41 s\nsecond line")
    assert signature == "the walk gave m3 twice, at # and 12 calls in # s"
    # what a rerun measures differently (an address, a time) reads the same; a name or a count does not
    assert div.example_signature("the walk gave m3 twice, at 0x9b and 12 calls in 1.2e-05 s") == signature
    assert div.example_signature("the walk gave m4 twice, at 0x9b and 12 calls in 3 s") != signature
    assert div.example_signature("the walk gave m3 twice, at 0x9b and 7 calls in 3 s") != signature
    text = div.baseline_text([("conformance/" + ROOTS, IMPL, ["TRV-7", "TRV-1"], {"TRV-7": signature, "TRV-1": "x"})],
                             "2.13.0")
    seven = next(e for e in _load(tmp_path, text) if e.match == "TRV-7")
    assert seven.example == signature and signature in seven.describe()
    assert div.declared_reason([seven], IMPL, "conformance/" + ROOTS, ["TRV-7"], {"TRV-7": signature}) is not None
    assert div.declared_reason([seven], IMPL, "conformance/" + ROOTS, ["TRV-7"], {"TRV-7": "another"}) is None
    assert div.declared_reason([seven], IMPL, "conformance/" + ROOTS, ["TRV-7"]) is None
    assert div.excusing([seven], IMPL, "conformance/" + ROOTS, ["TRV-7"], {"TRV-7": "another"}) == []


def _holds(recorded: str, later: str, old: bool = True) -> bool:
    return div.example_holds(div.example_signature(recorded), div.example_signature(later), old)


def test_a_signature_keeps_counts_indices_ranks_and_names():
    spl10 = "with 2 buckets the backend should be called 2 times, got {}"
    assert div.example_signature(spl10.format(3)) == spl10.format(3)
    assert not _holds(spl10.format(3), spl10.format(6)), "torch compiling every bucket thrice held as compiling one twice"
    grad = "rank {}, eager: the gradient of layers.{}.weight is None, the unsharded model's is not"
    assert not _holds(grad.format(0, 0), grad.format(0, 7)) and not _holds(grad.format(0, 0), grad.format(1, 0))
    shard = "rank 3 of a 8 world: shard 3 holds rows 12:{} of w"
    assert not _holds(shard.format(16), shard.format(15))
    # what differs between two runs of one failure reads the same: times (as the checks print them), a
    # ratio of times, addresses, process ids, ports and temporary paths
    for first, again in [
        ("eager: killed after 12 s in it at the ranks' limit of 60 s, where the step took 0.31 s",
         "eager: killed after 97 s in it at the ranks' limit of 180 s, where the step took 1.2e+00 s"),
        ("expected linear growth, but 4x the depth took 18.3x the time (0.0012s -> 0.0220s)",
         "expected linear growth, but 4x the depth took 31.0x the time (0.0009s -> 0.0280s)"),
        ("rank 1 failed: <function f at 0x7f3a12> pid 4242 [127.0.0.1]:29501 /tmp/pytest-of-u/pytest-3/t0/a.py",
         "rank 1 failed: <function f at 0x55aa01> pid 77 [127.0.0.1]:40001 /tmp/pytest-of-u/pytest-9/t1/a.py"),
    ]:
        assert div.example_signature(first) == div.example_signature(again), (first, again)
    assert div.example_signature("expected linear growth, but 8x the depth took 18.3x the time (1s -> 2s)") != \
        div.example_signature("expected linear growth, but 4x the depth took 18.3x the time (1s -> 2s)")


def test_a_measured_difference_is_bounded_by_the_recorded_one():
    fs29 = ("rank 0, eager: the gradient of layers.0.weight differs from the unsharded model's (max abs difference {}, "
            "largest entry 3.4, tolerance 1e-06 + rtol 1e-05 x each entry)")
    recorded = div.example_signature(fs29.format("1.2e-04"))
    assert "max abs difference <=1.2e-04," in recorded, recorded
    assert div.example_holds(recorded, div.example_signature(fs29.format("1e-04")))
    assert div.example_holds(recorded, div.example_signature(fs29.format("0.00012")))
    assert not div.example_holds(recorded, div.example_signature(fs29.format("5.1e+03"))), "a catastrophic miss held"
    assert not div.example_holds(recorded, div.example_signature(fs29.format("nan")))
    # the text around the bound is the failure's: another parameter is another failure
    assert not div.example_holds(recorded, div.example_signature(fs29.format("1e-04").replace("layers.0", "layers.7")))
    for phrase in ("max abs diff {}", "off by {}", "differs from the control's by {} (tolerance 0.01)"):
        assert _holds(phrase.format("0.5"), phrase.format("0.25")) and not _holds(phrase.format("0.5"), phrase.format("2"))
    # "first difference" names where, never how much
    assert not _holds("first difference 0.1", "first difference 0.0")


def test_an_old_example_holds_as_before_and_is_named_for_a_note(tmp_path):
    old_example = "with # buckets the backend should be called # times, got #"
    worse = div.example_signature("with 2 buckets the backend should be called 2 times, got 6")
    assert div.is_old_example(old_example) and not div.is_old_example(worse)
    assert div.example_holds(old_example, worse) and not div.example_holds(old_example, worse, old=False)
    (entry,) = _load(tmp_path, f'[[divergence]]\nmatch = "SPL-10"\ntest = "t.py::t[x]"\nexample = "{old_example}"\n'
                               'implementation = "x"\nreason = "r"\n')
    declared = [("conformance/t.py::t[x]", "x", ["SPL-10"], {"SPL-10": worse})]
    assert div.held_by_old_examples([entry], declared) == [entry]
    # an example of this release holds by its numbers, and is never noted
    new = div.Divergence("SPL-10", "r", "x", "y", test="t.py::t[x]", example=worse, baseline=True)
    assert div.held_by_old_examples([new], declared) == []
    assert div.is_old_example(div.example_signature("the walk took 0.4 s")) and _holds("took 0.4 s", "took 9 s", old=False)


def test_an_entry_expires_at_its_until_release(tmp_path):
    entries = _load(tmp_path, (
        '[[divergence]]\nmatch = "TRV-7"\nuntil = "2.13"\nreason = "ends in 2.13"\n\n'
        '[[divergence]]\nmatch = "TRV-1"\nuntil = "2.14"\nreason = "ends in 2.14"\n\n'
        '[[divergence]]\nmatch = "TRV-2"\ntorch = "<2.6"\nuntil = "2.6"\nreason = "its range ended first"\n'))
    ends_213, ends_214, ranged = entries
    assert div.expired(entries, "2.13.0+cpu") == [ends_213]
    assert div.expired(entries, "2.13.0a0+git1234") == [ends_213], "a build of 2.13 is 2.13"
    assert div.expired(entries, "2.12.1") == []
    assert div.expired(entries, "2.15.0") == [ends_213, ends_214]
    # an expired entry masks nothing; one outside its range neither masks nor expires
    assert div.for_torch(entries, "2.13.0") == [ends_214]
    assert div.for_torch(entries, "2.5.1") == [ends_213, ends_214, ranged]


@pytest.mark.parametrize("body, message", [
    ('match = "test_traversal.py::test_x"\ntest = "test_y"', "'test' narrows an invariant match to one test id"),
    ('match = "TRV-7"\ntest = 3', "'test' narrows an invariant match to one test id"),
    ('match = "TRV-7"\nuntil = "soon"', "'until' must be a torch release such as \"2.16\", got 'soon'"),
    ('match = "TRV-7"\nuntil = 2.16', "'until' must be a torch release"),
    ('match = "TRV-7"\nexample = "x"', "'example' narrows an entry with 'test' to one failure's signature"),
])
def test_a_bad_test_or_until_is_a_one_line_error(tmp_path, body, message):
    with pytest.raises(div.DivergenceFileError) as caught:
        _load(tmp_path, f'[[divergence]]\n{body}\nreason = "r"\n')
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_old_divergence_files_read_as_before(tmp_path):
    (entry,) = _load(tmp_path, '[[divergence]]\nmatch = "TRV-7"\ntorch = ">=2.4"\nreason = "r"\n', baseline=False)
    assert (entry.test, entry.until, entry.baseline, entry.narrow) == ("", "", False, False)


def _session(entries, per_test, declared):
    from pytest_fsdpcheck.plugin.options import Settings
    from pytest_fsdpcheck.plugin.session import Session

    session = Session(impls={IMPL: None}, devices=["cpu"], seed=None, settings=Settings(), divergences=entries,
                      torch_version="2.13.0")
    session.matrix.per_test.update(per_test)
    session.matrix.declared_tests.extend(declared)
    session.matched_entries.update(entries)
    session.matrix.cells[("TRV-7", IMPL)].add("fail")  # the run is not empty
    return session


def test_an_entry_whose_test_passed_is_fixed_and_fails_only_a_baselines_run(tmp_path):
    from pytest_fsdpcheck.plugin import verdicts

    text = (f'[[divergence]]\nmatch = "TRV-7"\ntest = "{ROOTS}"\nimplementation = "{IMPL}"\nreason = "still fails"\n\n'
            f'[[divergence]]\nmatch = "TRV-1"\ntest = "{WALK}"\nimplementation = "{IMPL}"\nreason = "passes now"\n')
    per_test = {"conformance/" + ROOTS: {"outcome": "xfail", "implementation": IMPL, "invariants": ["TRV-7"]},
                "conformance/" + WALK: {"outcome": "passed", "implementation": IMPL, "invariants": ["TRV-1", "TRV-2"]}}
    declared = [("conformance/" + ROOTS, IMPL, ["TRV-7"], None)]
    for baseline in (True, False):
        still, fixed = _load(tmp_path, text, baseline=baseline)
        found = verdicts.findings(_session([still, fixed], per_test, declared))
        assert found.fixed == [fixed] and found.stale == [] and found.unexpected == []
        # a baseline's finding fails the run by itself; a divergence file's only under strict
        assert verdicts.baseline_findings(found) == ([fixed] if baseline else [])
    # a test that did not pass (skipped, n/p, errored, deselected) proves nothing fixed
    skipped = {**per_test, "conformance/" + WALK: {**per_test["conformance/" + WALK], "outcome": "skipped"}}
    assert verdicts.findings(_session([still, fixed], skipped, declared)).fixed == []


def test_expired_entries_are_findings(tmp_path):
    from pytest_fsdpcheck.plugin import verdicts

    (entry,) = _load(tmp_path, '[[divergence]]\nmatch = "TRV-7"\nuntil = "2.13"\nreason = "r"\n')
    session = _session([], {}, [])
    session.expired_entries = [entry]
    found = verdicts.findings(session)
    assert found.expired == [entry] and verdicts.baseline_findings(found) == [entry]


# --- a suite run: write, hold, and what breaks the hold ----------------------------------

@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("FSDPCHECK_IMPL", raising=False)

    def run(*args):
        return pytester.runpytest_subprocess(
            "-p", "no:randomly", "--fsdpcheck", "--fsdpcheck-impl", IMPL, "-p", "tests.planted.noshrink",
            "-k", "test_traversal and (test_root_states or test_states_with_modules)", *args, timeout=600)

    return run


@pytest.mark.plugin
def test_a_written_baseline_holds_the_next_run_and_fails_on_what_changed(pytester, suite):
    written = suite("--fsdpcheck-write-baseline", "ci/baseline.toml")
    assert written.ret == pytest.ExitCode.TESTS_FAILED, written.stdout.str()  # writing excuses nothing
    written.stdout.fnmatch_lines(["baseline written to ci/baseline.toml: 1 entry *"])
    baseline = pytester.path / "ci" / "baseline.toml"
    entries = tomllib.loads(baseline.read_text())["divergence"]
    assert [(e["match"], e["test"], e["implementation"]) for e in entries] == [("TRV-7", ROOTS, IMPL)], entries
    recorded = entries[0]["example"]
    assert recorded and "#" not in recorded.split(":")[0], recorded  # the failure's first line, not the ID

    held = suite("--fsdpcheck-baseline", "ci/baseline.toml", "-rx")
    assert held.ret == pytest.ExitCode.OK, held.stdout.str()
    held.stdout.fnmatch_lines(["TRV-7 * declared *", "XFAIL *::test_root_states*declared divergence: TRV-7: failing on torch*"])

    # the same test failing the same invariant another way is a new FAIL, not the recorded one
    baseline.write_text(baseline.read_text().replace(f"example = {div._toml_str(recorded)}",
                                                     'example = "another way of failing TRV-7"'))
    other = suite("--fsdpcheck-baseline", "ci/baseline.toml")
    assert other.ret == pytest.ExitCode.TESTS_FAILED, other.stdout.str()
    other.stdout.fnmatch_lines(["TRV-7 * FAIL *"])
    baseline.write_text(baseline.read_text().replace('example = "another way of failing TRV-7"',
                                                     f"example = {div._toml_str(recorded)}"))

    # the recorded failure's release has come, and an entry for a test that passes
    baseline.write_text(baseline.read_text().replace("reason =", 'until = "2.0"\nreason =')
                        + f'\n[[divergence]]\nmatch = "TRV-1"\ntest = "{WALK}"\nimplementation = "{IMPL}"\nreason = "r"\n')
    broken = suite("--fsdpcheck-baseline", "ci/baseline.toml", "--fsdpcheck-report", "report.json")
    assert broken.ret == pytest.ExitCode.TESTS_FAILED, broken.stdout.str()
    broken.stdout.fnmatch_lines([
        "TRV-7 * FAIL *",  # expired: it masks nothing
        "expired divergence: TRV-7 * in *::test_root_states* (baseline.toml entry 1) was expected to end in torch 2.0, *",
        "no longer fails: TRV-1 * in *::test_states_with_modules* (baseline.toml entry 2) excused no failure*delete the entry",
    ])
    import json

    report = json.loads((pytester.path / "report.json").read_text())
    assert [e["match"] for e in report["baseline"]["expired"]] == ["TRV-7"]
    assert [e["match"] for e in report["baseline"]["fixed"]] == ["TRV-1"]
    jsonschema = pytest.importorskip("jsonschema")
    from pytest_fsdpcheck.report.content import schema

    jsonschema.Draft202012Validator(schema()).validate(report)

    # the same file as a plain divergence file: its findings fail the run only under strict
    # (as a baseline, the entry that no longer fails is a finding about the file: exit status 12)
    baseline.write_text(f'[[divergence]]\nmatch = "TRV-1"\ntest = "{WALK}"\nimplementation = "{IMPL}"\nreason = "r"\n'
                        f'[[divergence]]\nmatch = "TRV-7"\nimplementation = "{IMPL}"\nreason = "r"\n')
    plain = suite("--fsdpcheck-divergences", "ci/baseline.toml")
    assert plain.ret == pytest.ExitCode.OK, plain.stdout.str()
    plain.stdout.fnmatch_lines(["no longer fails: TRV-1 *"])
    from pytest_fsdpcheck.report.verdict import EXIT_STRICT

    stale = suite("--fsdpcheck-baseline", "ci/baseline.toml")
    assert stale.ret == EXIT_STRICT, stale.stdout.str()
    stale.stdout.fnmatch_lines(["no longer fails: TRV-1 *"])
