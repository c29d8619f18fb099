"""pytest plugin for the project's planted-bug runs (``-p tests.planted.noshrink``):
the suite's profile without hypothesis' shrink phase. A planted bug fails on
purpose in many tests; shrinking each failure again only costs time."""

import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    from hypothesis import Phase, settings

    settings.register_profile(
        "fsdpcheck-planted", parent=settings.default, phases=[Phase.explicit, Phase.reuse, Phase.generate]
    )
    settings.load_profile("fsdpcheck-planted")
