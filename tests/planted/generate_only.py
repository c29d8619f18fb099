"""``-p tests.planted.generate_only``: a run generates its seed stream and
nothing else: no saved example is replayed first and nothing is shrunk.

A shard's examples are then its stream's alone. With the shared database
the examples replayed first depend on timing: a worker that starts after
another saved a failure replays that one before its own stream.
"""

import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    from hypothesis import Phase

    from pytest_fsdpcheck.core import profiles

    profiles.override(phases=[Phase.explicit, Phase.generate])
