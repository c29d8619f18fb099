"""``-p tests.planted.noshrink``: planted-bug runs skip hypothesis' shrink phase.

They prove that a bug is detected and attributed to its ID; shrinking only
makes the printed example smaller and costs most of the run's time.
"""

import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    from hypothesis import Phase, settings

    # Derived from whatever profile pytest-fsdpcheck loaded (ci: derandomized).
    settings.register_profile(
        "fsdpcheck-planted", parent=settings.default, phases=[Phase.explicit, Phase.reuse, Phase.generate]
    )
    settings.load_profile("fsdpcheck-planted")
