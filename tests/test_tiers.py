"""The tiers of the project's own tests (tests/conftest.py): every test has
exactly one, and pytest's ``-m`` sees only that one, so ``-m unit`` never
runs a module's costlier test and ``-m "not e2e"`` never runs an e2e one.
The conftest is run as written, in an inner in-process run."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.plugin

CONFTEST = Path(__file__).with_name("conftest.py")

MIXED = """
import pytest

pytestmark = pytest.mark.unit


def test_cheap():
    pass


@pytest.mark.e2e
@pytest.mark.parametrize("n", [1, 2])
def test_spawns_ranks(n):
    pass


class TestGrouped:
    pytestmark = pytest.mark.kill

    def test_planted(self):
        pass

    @pytest.mark.process
    def test_fresh_interpreter(self):
        pass
"""


@pytest.fixture
def tiered(pytester):
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makepyfile(test_mixed=MIXED)
    return pytester


@pytest.mark.parametrize(("expression", "selected"), [
    ("unit", ["test_cheap"]),
    ("e2e", ["test_spawns_ranks[1]", "test_spawns_ranks[2]"]),
    ("kill", ["TestGrouped::test_planted"]),
    ("process", ["TestGrouped::test_fresh_interpreter"]),
    ("not e2e", ["test_cheap", "TestGrouped::test_planted", "TestGrouped::test_fresh_interpreter"]),
])
def test_the_nearest_tier_is_the_only_one_m_selects(tiered, expression, selected):
    result = tiered.runpytest_inprocess("-p", "no:randomly", "--collect-only", "-q", "-m", expression)
    assert result.ret == pytest.ExitCode.OK, result.outlines
    ids = sorted(line.split("::", 1)[1] for line in result.outlines if line.startswith("test_mixed.py::"))
    assert ids == sorted(selected), result.outlines


@pytest.mark.parametrize(("source", "says"), [
    ("def test_new():\n    pass\n", "test_new: no tier"),
    ("import pytest\n\n@pytest.mark.unit\n@pytest.mark.e2e\ndef test_two():\n    pass\n", "test_two: e2e and unit"),
    ("import pytest\npytestmark = [pytest.mark.unit, pytest.mark.kill]\n\ndef test_module_two():\n    pass\n",
     "test_module_two: kill and unit"),
])
def test_a_test_without_exactly_one_tier_is_a_usage_error(tiered, source, says):
    tiered.makepyfile(test_new=source)
    result = tiered.runpytest_inprocess("-p", "no:randomly", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines + result.errlines
    [line] = [line for line in result.errlines if "tier" in line]
    assert line.startswith("ERROR: tests need exactly one tier mark") and says in line, line
    assert "test_mixed" not in line, line
