"""Messages of one screen (issue 38 finding 11): the difference, not both
lists; one line for what every rank reports alike; an implementation's
text (a repr, an error) cut to a line; Hypothesis' explanation lines
limited to the user's and torch's frames. What a message shortens stays in
the violation's evidence, so the known-bug judge compares the whole."""

import pytest

pytestmark = pytest.mark.unit

pytest.importorskip("torch.distributed.fsdp")

from pytest_fsdpcheck.checks import ConformanceFailure  # noqa: E402


def test_fs2_7_on_a_users_model_names_the_difference_not_both_lists():
    """FS2-7 printed every flagged module and every managed one (two
    45-name lists on a framework's model): now the modules missing the
    flags, on one line, none of those flagged rightly."""
    from pytest_fsdpcheck.cases import checks

    with pytest.raises(ConformanceFailure) as failure:
        checks.run_check(checks.CHECKS["check_fully_shard_calls"][0], "tests.planted.plans:compiled_blocks",
                         "tests.planted.fsdp2:FlagsWrapperOnly")
    (violation,) = failure.value.violations
    assert violation.invariant == "FS2-7"
    assert "\n" not in violation.message and len(violation.message) < 300, violation.message
    assert "missing [layers.0._orig_mod, layers.1._orig_mod]" in violation.message
    assert "lm_head" not in violation.message  # flagged rightly: not listed
    flagged, expected = violation.evidence  # the whole, for the known-bug judge
    assert "lm_head" in flagged and "layers.0._orig_mod" in expected and len(expected) == 19


def test_difference_states_missing_and_extra_or_the_first_reordering():
    from pytest_fsdpcheck.checks import difference

    names = [f"layers.{i}" for i in range(45)]
    text = difference(names, names[:40] + ["stray"])
    assert text.startswith("missing [layers.40, layers.41, layers.42, layers.43, layers.44]; extra [stray]")
    assert "layers.0" not in text.replace("layers.40", "")
    assert difference(["a", "b"], ["b", "a"]) == "first difference at position 0: expected a, got b"
    long_text = difference(names, [])
    assert len(long_text) < 200 and "more" in long_text


def test_an_implementations_repr_is_cut_to_a_line():
    """A ModuleDict given as a group printed its 40-line repr in the error."""
    import torch

    from pytest_fsdpcheck.checks import one_line

    blocks = torch.nn.ModuleDict({str(i): torch.nn.Linear(2, 2) for i in range(40)})
    text = one_line(ValueError(f"fully_shard does not support containers: {blocks}"))
    assert "\n" not in text and len(text) < 260
    assert text.startswith("fully_shard does not support containers: ModuleDict(") and text.endswith("[41 more lines]")


def test_what_every_rank_reports_alike_is_one_line():
    """FS2-9's ranks each reported the same failure, one violation per rank."""
    from pytest_fsdpcheck.checks.distributed import check_fsdp2_end_to_end

    error = "Traceback (most recent call last):\n  ...\nRuntimeError: the step broke"
    results = [{"rank": r, "error": error} for r in range(4)]
    (violation,) = check_fsdp2_end_to_end(results, "torch")
    assert violation.message == "ranks 0, 1, 2, 3: expected a training step, but the rank failed: RuntimeError: the step broke"
    assert len(violation.evidence) == 4  # each rank's own message, for the judge
    results[2] = {"rank": 2, "error": "RuntimeError: another"}
    messages = [v.message for v in check_fsdp2_end_to_end(results, "torch")]
    assert messages == ["ranks 0, 1, 3: expected a training step, but the rank failed: RuntimeError: the step broke",
                        "rank 2: expected a training step, but the rank failed: RuntimeError: another"]


def test_by_rank_keeps_single_and_unranked_violations_as_they_are():
    from pytest_fsdpcheck.checks import Violation, by_rank

    found = [Violation("FS2-9", "rank 0, eager: x"), Violation("FS2-9", "rank 1, compiled: x"), Violation("FS2-9", "ranks disagree")]
    assert by_rank(found) == found


def test_hypothesis_explanations_keep_the_users_and_torchs_lines_only():
    """"These lines were always and only run by failing examples" listed
    the plugin's own checkers (pytest_fsdpcheck/checks/...): dropped, the
    user's and torch's lines kept; an explanation with nothing left goes."""
    from pathlib import Path

    import torch

    from pytest_fsdpcheck.plugin import tracebacks

    own = Path(tracebacks.__file__).parents[1]  # the package, above plugin/
    torch_file = Path(torch.__file__).parent / "distributed" / "fsdp" / "_traversal_utils.py"
    stub = ["Explanation:", "    These lines were always and only run by failing examples:"]
    exc = AssertionError("TRV-1: ...")
    exc.__notes__ = ["Falsifying example: ...", *stub, f"        {own / 'checks' / 'traversal.py'}:110",
                     f"        {torch_file}:42", f"        {own / 'reference' / 'traversal.py'}:7", "after"]
    import builtins

    group_type = getattr(builtins, "BaseExceptionGroup", None)
    if group_type is None:  # Python 3.10: Hypothesis raises no exception groups there
        pytest.skip("exception groups are Python 3.11's")
    group = group_type("two", [exc, ValueError("x")])
    group.exceptions[1].__notes__ = [*stub, f"        {own / 'strategies.py'}:3"]
    tracebacks.drop_own_explanations(group)
    assert exc.__notes__ == ["Falsifying example: ...", *stub, f"        {torch_file}:42",
                             f"        {own / 'reference' / 'traversal.py'}:7", "after"]
    assert group.exceptions[1].__notes__ == []
