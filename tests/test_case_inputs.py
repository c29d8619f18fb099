"""What a model factory is called with and what it gives: a required
argument the suite cannot fill is one line pointing to ``@model_factory``;
keyword inputs of the forward (``example_kwargs``) reach every area that
calls the model; a drawn factory's configurations without a plan are
rejected and others drawn."""

import pytest
from hypothesis import strategies as st

from pytest_fsdpcheck.cases import CaseError, build_case, model_factory


def test_a_required_argument_is_one_line_pointing_to_model_factory():
    def make(depth):  # the suite calls a factory with keyword arguments it draws, or none
        raise AssertionError("not called")

    with pytest.raises(CaseError) as info:
        build_case(make)
    message = str(info.value)
    assert "\n" not in message, message
    assert "required argument 'depth'" in message and "@pytest_fsdpcheck.cases.model_factory(depth=" in message

    # one strategy declared, another argument still required: that one is named
    @model_factory(depth=st.integers(1, 2))
    def partly(depth, width):
        raise AssertionError("not called")

    with pytest.raises(CaseError, match=r"required argument 'width'.*model_factory\(width="):
        build_case(partly, depth=1)
