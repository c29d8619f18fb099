"""Plugin for planted-bug suite runs (``-p tests.noshrink``): those runs
only ask *whether* a cell fails, so shrinking a failing example to its
minimum is wasted time. Loaded after pytest-fsdpcheck has activated its
profile, it re-loads that profile without the shrink phase."""

import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    from hypothesis import Phase, settings

    current = settings.default
    phases = tuple(p for p in current.phases if p is not Phase.shrink)
    settings.register_profile("fsdpcheck-planted", parent=current, phases=phases)
    settings.load_profile("fsdpcheck-planted")
