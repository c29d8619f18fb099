"""Reference FSDP state traversal (TRV): DFS pre-order over registered
children, de-duplicated, never entering a module marked by an incompatible API.
"""

from __future__ import annotations

import weakref

INCOMPATIBLE_APIS = frozenset({"replicate"})


class ReferenceState:
    __slots__ = ("_handle", "_is_root", "__weakref__")

    def __init__(self, handle, is_root: bool):
        self._handle = handle
        self._is_root = is_root


def iter_children(module):
    # Read the registry directly: ``children()`` is a generator per module,
    # and a module registered under two names is still one child.
    seen = set()
    for child in module._modules.values():
        if child is not None and id(child) not in seen:
            seen.add(id(child))
            yield child


class ReferenceTraversal:
    """Keeps states and marks beside the modules (weakly), never on them."""

    def __init__(self, root_states_walk: str = "traversal", registry_on_read: bool = False):
        """Switches that model known torch bugs (``pytest_fsdpcheck.known``):
        ``root_states_walk="modules"``, torch's ``_get_fsdp_root_states``, which
        walks ``root.modules()`` (recursive, not pruned at ``replicate``);
        ``registry_on_read=True``, torch < 2.2, whose ``_composable`` check
        stores an empty composable registry on every module it visits that
        has none (one marked by a composable API such as ``replicate`` has
        its own)."""
        if root_states_walk not in ("traversal", "modules"):
            raise ValueError(f"root_states_walk must be 'traversal' or 'modules', got {root_states_walk!r}")
        self._root_states_walk = root_states_walk
        self._registry_on_read = registry_on_read
        self._state_of = weakref.WeakKeyDictionary()
        self._marks = weakref.WeakKeyDictionary()

    def new_state(self, handle, is_root):
        return ReferenceState(handle, is_root)

    def attach_state(self, module, state):
        self._state_of[module] = state

    def mark_incompatible(self, module, api):
        self._marks.setdefault(module, set()).add(api)

    def _composable(self, module) -> bool:
        return not (self._marks.get(module, set()) & INCOMPATIBLE_APIS)

    def states_with_modules(self, root):
        states, modules = [], []
        seen_states, seen_modules = set(), set()
        stack = [root]
        while stack:
            module = stack.pop()
            if id(module) in seen_modules:
                continue
            seen_modules.add(id(module))
            # torch's module marked by a composable API holds that API's
            # registry already (it is where the mark is): only an unmarked
            # module gets an empty one (torch 2.0.1 and 2.1.2's _get_registry)
            if self._registry_on_read and module not in self._marks:
                import collections

                from torch.distributed._composable.contract import REGISTRY_KEY

                module.__dict__.setdefault(REGISTRY_KEY, collections.OrderedDict())
            if not self._composable(module):
                continue
            state = self._state_of.get(module)
            if state is not None and id(state) not in seen_states:
                seen_states.add(id(state))
                states.append(state)
                modules.append(module)
            # Reversed so the first-registered child is popped first.
            stack.extend(reversed(list(iter_children(module))))
        return states, modules

    def handles(self, root):
        states, _ = self.states_with_modules(root)
        return [s._handle for s in states if s._handle is not None]

    def root_states(self, root):
        if self._root_states_walk == "modules":
            owned = (self._state_of.get(m) for m in root.modules())
            states = list(dict.fromkeys(s for s in owned if s is not None))
        else:
            states, _ = self.states_with_modules(root)
        return [s for s in states if s._is_root]
