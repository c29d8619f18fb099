"""The reference implementation with the switches of some known bugs on."""

from __future__ import annotations


def reference_with(bugs, like=None):
    """A fresh :class:`ReferenceImplementation` whose areas carry the switches
    of ``bugs``. ``like`` is the implementation being explained: the replay
    feeds the reference the same graph form it was fed."""
    from ..reference import ReferenceImplementation

    switches: dict[str, dict] = {}
    for bug in bugs:
        for area, flags in bug.reference.items():
            switches.setdefault(area, {}).update(flags)
    impl = ReferenceImplementation(switches)
    form = getattr(getattr(like, "splitting", None), "graph_form", None)
    if form is not None and impl.splitting is not None:
        impl.splitting.graph_form = form
    return impl
