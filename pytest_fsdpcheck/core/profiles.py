"""Hypothesis budgets per profile.

``ci`` is derandomized and keeps no example database, so two runs (and a
serial run and ``-n 2``) see the same examples; ``dev`` keeps the database
and a printed seed; ``fuzz`` runs long.
"""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, Phase, settings

from .run_state import current as _run

SCALE = {"ci": 1.0, "dev": 2.0, "fuzz": 50.0}
# The active profile, its overrides, the budget switch and the example digest
# are the running session's (run_state.RunState), not this module's.


def _register() -> None:
    # Built on Hypothesis' own defaults, not on whatever profile is loaded:
    # a user's profile (phases=[Phase.explicit], max_examples=1 ...) must
    # not reach the suite's properties.
    common = dict(
        parent=settings.get_profile("default"),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        print_blob=True,
    )
    settings.register_profile("fsdpcheck-ci", derandomize=True, database=None, **common)
    settings.register_profile("fsdpcheck-dev", **common)
    settings.register_profile(
        "fsdpcheck-fuzz", phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink], **common
    )


def activate(profile: str) -> None:
    """Select the suite's profile. It is not loaded process-wide: only the
    suite's own properties (through :func:`examples`) use it, so a user's
    Hypothesis tests in the same run keep their own settings."""
    _register()
    _run().profile = profile


def override(**changes) -> None:
    """Settings that take precedence over the active profile for the suite's
    properties (the project's planted-bug runs skip shrinking this way)."""
    _run().overrides.update(changes)


def active() -> str:
    return _run().profile


def current() -> settings:
    """The settings the suite's properties run under."""
    _register()
    run = _run()
    return settings(settings.get_profile(f"fsdpcheck-{run.profile}"), **run.overrides)


def budgeted() -> None:
    """Under a time budget a property runs in rounds of its ``ci`` example
    count until its share of the time is spent (see fuzz.py)."""
    _run().budgeted = True


def _examples_settings(base: int) -> settings:
    run = _run()
    scale = 1.0 if run.budgeted else SCALE[run.profile]
    return settings(current(), max_examples=max(1, int(base * scale)))


def examples(base: int):
    """``@examples(n)``: n examples under ``ci``, scaled for ``dev``/``fuzz``.

    The settings given here are those of the session importing the module;
    a suite module is imported once a process, so each session's call puts
    its own in place for the call (:func:`session_settings`)."""
    def decorate(test):
        test = _examples_settings(base)(test)
        test._fsdpcheck_examples = base
        return test

    return decorate


@contextlib.contextmanager
def session_settings(test):
    """Around a call of a suite property: the running session's settings
    (profile, overrides, budget), then the ones it had before."""
    base = getattr(test, "_fsdpcheck_examples", None)
    if base is None:
        yield
        return
    before = test._hypothesis_internal_use_settings
    test._hypothesis_internal_use_settings = _examples_settings(base)
    try:
        yield
    finally:
        test._hypothesis_internal_use_settings = before


# A running digest of the examples built in the current test, so two runs can
# be compared example by example rather than by counts alone.


def reset_digest() -> None:
    import hashlib

    _run().digest = hashlib.blake2b(digest_size=8)


def note_example(source: str) -> None:
    digest = _run().digest
    if digest is not None:
        digest.update(source.encode())


def digest() -> str | None:
    digest = _run().digest
    return None if digest is None else digest.hexdigest()
