"""Known bugs as executable, version-ranged models.

An implementation declares its known bugs in a ``known_bugs`` attribute (a
sequence of :class:`KnownBug`); the ``torch`` implementation declares the
ones in :mod:`pytest_fsdpcheck.impls.torch_bugs`. During a run, :func:`.judge.conform` decides for each
failing example whether those bugs explain it: explained examples are
counted and the search goes on, anything unexplained fails. ``python -m
pytest_fsdpcheck.known`` lists the bugs and prints or runs their torch-only
reproducers.
"""

from ..core.bugs import KnownBug, active_bugs, known_bugs_of

__all__ = ["KnownBug", "active_bugs", "known_bugs_of"]
