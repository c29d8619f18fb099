"""``-p tests.planted.noshrink``: planted-bug runs skip hypothesis' shrink phase.

They prove that a bug is detected and attributed to its ID; shrinking only
makes the printed example smaller and costs most of the run's time.
"""

import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    from hypothesis import Phase

    from pytest_fsdpcheck.core import profiles

    # On top of whatever profile pytest-fsdpcheck selected (ci: derandomized).
    profiles.override(phases=[Phase.explicit, Phase.reuse, Phase.generate])
