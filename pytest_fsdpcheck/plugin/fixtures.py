"""What a conformance test may ask of the run: the ``fsdpcheck_run`` fixture.

The suite in ``conformance/`` is the plugin's client, not a part of it: it
reads the session (seed, world sizes, limits) and tells the verdict whose
fault a failure is through this one object, never by importing the
plugin's modules or the report's property keys. Registered as a plugin by
``pytest_configure`` only when the run is enabled: without ``--fsdpcheck``
the fixture does not exist.
"""

from __future__ import annotations

import pytest

from ..report.verdict import PROP_CASE_ERROR, PROP_ENVIRONMENT
from .session import get_session, simulated_world_size, world_size_for


class SuiteRun:
    """The session as one suite test sees it, and the two verdicts a test
    decides itself: an environment ERROR and a user's case error."""

    def __init__(self, node, config):
        self._node = node
        self._config = config
        self._session = get_session(config)

    @property
    def seed(self) -> int | None:
        """The run's seed: None under the ci profile (fixed examples)."""
        return self._session.seed

    @property
    def timeout_s(self) -> float:
        """The per-call limit an implementation runs under (--fsdpcheck-timeout)."""
        return self._session.timeout_s

    @property
    def plan_examples(self) -> int:
        """How many worlds a user's plan is drawn in (--fsdpcheck-plan-examples)."""
        return self._session.plan_examples

    @property
    def impl_specs(self) -> tuple[str, ...]:
        """Every implementation the run checks, as its spec."""
        return tuple(self._session.impls)

    def spec_of(self, impl) -> str:
        """The spec ``impl`` (a test's ``fsdpcheck_impl``) was loaded from."""
        return next(spec for spec, obj in self._session.impls.items() if obj is impl)

    def world_results(self, key: tuple, run_world):
        """The ranks' results of the world ``key`` (world size, device,
        implementations, task, seed), run once a session: ``run_world()`` in
        this process, or under xdist in the first worker that asks, whose
        results the others read (a world is the slow part: each test of
        FS2-9, FS2-11 and FS2-15, or of SPL-16, SPL-20 and EXO-9, reads the
        same ranks, and xdist may deal them to different workers). Another
        session's ranks ran other code (its seed, its faults): the cache is
        this session's."""
        cache = self._session.run.rank_runs
        if key not in cache:
            cache[key] = _shared_once(self._session.run.worlds_dir, key, run_world)
        return cache[key]

    def world_size(self, device: str) -> int:
        """Real ranks for the distributed checks on ``device`` (torchrun's world, or
        --fsdpcheck-world-size capped to what this machine can spawn)."""
        return world_size_for(self._config, device)

    @property
    def simulated_world_size(self) -> int | None:
        """The world users' plans are checked at in the simulated tier; None: the check's default."""
        return simulated_world_size(self._config)

    def environment_error(self, why: str):
        """Mark this test's failure as the machine's (ERROR, exit 10), and
        return the exception to raise."""
        from ..checks import EnvironmentFault

        self.mark_environment(why)
        return EnvironmentFault(why)

    def mark_environment(self, why: str) -> None:
        """Mark the failure being raised as the machine's (ERROR, exit 10)."""
        self._node.user_properties.append((PROP_ENVIRONMENT, why))

    def case_error(self, model: str, error: str):
        """Fail this test as the user's mistake in ``model``'s factory: one
        line, exit 11, no cell in an implementation's column."""
        self._node.user_properties.append((PROP_CASE_ERROR, {"model": model, "error": error}))
        pytest.fail(error, pytrace=False)


@pytest.fixture
def fsdpcheck_run(request) -> SuiteRun:
    """The run as a conformance test may use it (:class:`SuiteRun`)."""
    return SuiteRun(request.node, request.config)


def _shared_once(folder: str | None, key: tuple, compute):
    """``compute()``, or what another worker's ``compute()`` for ``key``
    left in ``folder``: the first to take the key's lock computes and
    writes, the others wait for it and read. A computation that raised
    leaves nothing: the next asker computes again."""
    if folder is None:
        return compute()
    try:
        import fcntl
    except ImportError:  # no POSIX locks: each worker runs its own worlds
        return compute()
    import hashlib
    import os

    import torch

    path = os.path.join(folder, hashlib.sha256(repr(key).encode()).hexdigest()[:24])
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if os.path.exists(path):
                return torch.load(path, weights_only=False)
            results = compute()
            torch.save(results, path + ".partial")
            os.replace(path + ".partial", path)
            return results
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
