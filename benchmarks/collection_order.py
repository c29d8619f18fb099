"""The baseline for bench_first_failure: the suite in pytest's collection
order, as it ran before it was ordered cheapest first. Loaded with
``-p collection_order``; it restores the order pytest collected, whatever
the other hooks did to it, and keeps their deselection."""

import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    collected = {id(item): i for i, item in enumerate(items)}
    result = yield
    items.sort(key=lambda item: collected.get(id(item), len(collected)))
    return result
