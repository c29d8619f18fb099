"""``-p tests.planted.no_shared_modules``: the suite's module trees never
share a module (a generator with a feature switched off), so the coverage
report must flag shared modules."""

import functools

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    from pytest_fsdpcheck.generators import trees

    # Before the conformance modules import it by name.
    trees.module_trees = functools.partial(trees.module_trees, shared=False)
