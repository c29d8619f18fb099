"""Hypothesis budgets per profile.

``ci`` is derandomized and keeps no example database, so two runs (and a
serial run and ``-n 2``) see the same examples; ``dev`` keeps the database
and a printed seed; ``fuzz`` runs long.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

SCALE = {"ci": 1.0, "dev": 2.0, "fuzz": 50.0}
_active = "ci"


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


_overrides: dict = {}


def activate(profile: str) -> None:
    """Select the suite's profile. It is not loaded process-wide: only the
    suite's own properties (through :func:`examples`) use it, so a user's
    Hypothesis tests in the same run keep their own settings."""
    global _active
    _register()
    _active = profile


def override(**changes) -> None:
    """Settings that take precedence over the active profile for the suite's
    properties (the project's planted-bug runs skip shrinking this way)."""
    _overrides.update(changes)


def active() -> str:
    return _active


def current() -> settings:
    """The settings the suite's properties run under."""
    _register()
    return settings(settings.get_profile(f"fsdpcheck-{_active}"), **_overrides)


_budgeted = False


def budgeted() -> None:
    """Under a time budget a property runs in rounds of its ``ci`` example
    count until its share of the time is spent (see fuzz.py)."""
    global _budgeted
    _budgeted = True


def examples(base: int):
    """``@examples(n)``: n examples under ``ci``, scaled for ``dev``/``fuzz``."""
    scale = 1.0 if _budgeted else SCALE[_active]
    return settings(current(), max_examples=max(1, int(base * scale)))


# A running digest of the examples built in the current test, so two runs can
# be compared example by example rather than by counts alone.
_digest = None


def reset_digest() -> None:
    global _digest
    import hashlib

    _digest = hashlib.blake2b(digest_size=8)


def note_example(source: str) -> None:
    if _digest is not None:
        _digest.update(source.encode())


def digest() -> str | None:
    return None if _digest is None else _digest.hexdigest()
