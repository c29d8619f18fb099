"""A traversal that loses a state on trees of six or more modules and logs
every tree it is handed (``FSDPCHECK_REPLAY_LOG``), so a test can see which
example a run tried first: the one its example database replayed, or a new one."""

from __future__ import annotations

import os

from pytest_fsdpcheck.reference.traversal import ReferenceTraversal


def shape(root) -> str:
    return ",".join(name or "root" for name, _ in root.named_modules(remove_duplicate=False))


class _Logged(ReferenceTraversal):
    def states_with_modules(self, root):
        with open(os.environ["FSDPCHECK_REPLAY_LOG"], "a", encoding="utf-8") as log:
            log.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {shape(root)}\n")
        states, modules = super().states_with_modules(root)
        if len(list(root.modules())) >= 6 and states:
            return states[:-1], modules[:-1]
        return states, modules


class LosesAState:
    traversal = _Logged()
