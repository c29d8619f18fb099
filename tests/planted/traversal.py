"""Planted traversal bugs (TRV-1..9).

Each implementation is the reference traversal with one realistic mistake;
``PLANTED`` maps its spec to the invariant that must catch it and the
conformance tests that are enough to show it (keeps the self-test fast).
"""

from __future__ import annotations

from collections import deque

from pytest_fsdpcheck.contract import Implementation
from pytest_fsdpcheck.reference.traversal import ReferenceTraversal, iter_children


class _Walk(ReferenceTraversal):
    """The reference walk, split into overridable steps."""

    def _children(self, module):
        # Reversed so the first-registered child is popped first.
        return list(reversed(list(iter_children(module))))

    def _visit(self, module, states, modules, seen_states):
        state = self._state_of.get(module)
        if state is not None and id(state) not in seen_states:
            seen_states.add(id(state))
            states.append(state)
            modules.append(module)

    def states_with_modules(self, root):
        states, modules = [], []
        seen_states, seen_modules = set(), set()
        stack = [root]
        while stack:
            module = stack.pop()
            if id(module) in seen_modules:
                continue
            seen_modules.add(id(module))
            if not self._composable(module):
                continue
            self._visit(module, states, modules, seen_states)
            stack.extend(self._children(module))
        return states, modules


class _DedupByModule(_Walk):
    # The module visited set is trusted to dedupe states too, so a state
    # attached to two modules is listed once per owner.
    def _visit(self, module, states, modules, seen_states):
        state = self._state_of.get(module)
        if state is not None:
            states.append(state)
            modules.append(module)


class _LastOwner(_Walk):
    # Every later owner overwrites the state's module entry.
    def _visit(self, module, states, modules, seen_states):
        state = self._state_of.get(module)
        if state is not None and id(state) in seen_states:
            modules[[id(s) for s in states].index(id(state))] = module
        else:
            super()._visit(module, states, modules, seen_states)


class _BreadthFirst(_Walk):
    # A queue where a stack belongs: level order instead of pre-order.
    def states_with_modules(self, root):
        states, modules = [], []
        seen_states, seen_modules = set(), set()
        queue = deque([root])
        while queue:
            module = queue.popleft()
            if id(module) in seen_modules:
                continue
            seen_modules.add(id(module))
            if not self._composable(module):
                continue
            self._visit(module, states, modules, seen_states)
            queue.extend(iter_children(module))
        return states, modules


class _RegistryOrder(_Walk):
    # Finds the reachable states correctly, then emits them in the order the
    # implementation created them (its own registry), not in traversal order.
    def __init__(self):
        super().__init__()
        self._created = []

    def new_state(self, handle, is_root):
        state = super().new_state(handle, is_root)
        self._created.append(state)
        return state

    def states_with_modules(self, root):
        states, modules = super().states_with_modules(root)
        owner = {id(s): m for s, m in zip(states, modules, strict=True)}
        ordered = [s for s in self._created if id(s) in owner]
        return ordered, [owner[id(s)] for s in ordered]


class _UnprunedFastPath(_BreadthFirst):
    # With nothing marked there is nothing to prune, so a level-order sweep
    # "is as good": the mistake only shows on trees without replicate marks.
    def states_with_modules(self, root):
        states, modules = super().states_with_modules(root)
        stack, seen = [root], set()
        while stack:
            module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            if not self._composable(module):
                return _Walk.states_with_modules(self, root)
            stack.extend(iter_children(module))
        return states, modules


class _EntersReplicate(_Walk):
    # The composable registry is never consulted.
    def _composable(self, module):
        return True


class _KeepsReplicateState(_Walk):
    # Stops below a replicate module but still lists the module's own state.
    def states_with_modules(self, root):
        states, modules = [], []
        seen_states, seen_modules = set(), set()
        stack = [root]
        while stack:
            module = stack.pop()
            if id(module) in seen_modules:
                continue
            seen_modules.add(id(module))
            self._visit(module, states, modules, seen_states)
            if self._composable(module):
                stack.extend(self._children(module))
        return states, modules


class _ReversedChildren(_Walk):
    # Children pushed in registration order, so the last one is popped first.
    def _children(self, module):
        return list(iter_children(module))


class _HandlesPostOrder(_Walk):
    # Handles gathered on the way back up the tree: reversed state order.
    def handles(self, root):
        return list(reversed(super().handles(root)))


class _SeedEraHandles(_Walk):
    # Reads only the seed-era ``_handles`` list; torch >= 2.1 states have ``_handle``.
    def handles(self, root):
        states, _ = self.states_with_modules(root)
        return [h for s in states for h in getattr(s, "_handles", [])]


class _UnfilteredRoots(_Walk):
    # ``_is_root`` is never looked at.
    def root_states(self, root):
        states, _ = self.states_with_modules(root)
        return states


class _Recursive(_Walk):
    # The textbook recursive DFS: Python's recursion limit caps the depth.
    def states_with_modules(self, root):
        states, modules, seen_states, seen_modules = [], [], set(), set()

        def walk(module):
            if id(module) in seen_modules:
                return
            seen_modules.add(id(module))
            if not self._composable(module):
                return
            self._visit(module, states, modules, seen_states)
            for child in iter_children(module):
                walk(child)

        walk(root)
        return states, modules


class _ListVisited(_Walk):
    # Visited modules kept in a list: every membership test is a linear scan.
    def states_with_modules(self, root):
        states, modules, seen_states, seen_modules = [], [], set(), []
        stack = [root]
        while stack:
            module = stack.pop()
            if module in seen_modules:
                continue
            seen_modules.append(module)
            if not self._composable(module):
                continue
            self._visit(module, states, modules, seen_states)
            stack.extend(self._children(module))
        return states, modules


class _MarksVisited(_Walk):
    # Caches "already visited" on the module itself and never clears it.
    def _visit(self, module, states, modules, seen_states):
        module._fsdp_traversal_seen = True
        super()._visit(module, states, modules, seen_states)


class _LeaksDefaultDtype(ReferenceTraversal):
    # Right root states; only it switches torch's default dtype and leaves it
    # so. A leak, no violation: it FAILs the run (LeakedGlobalState names every
    # invariant of the test) and meets no demand (tests/test_planted_traversal.py).
    def root_states(self, root):
        import torch

        torch.set_default_dtype(torch.float64)
        return super().root_states(root)


def _impl(traversal_cls):
    class Planted(Implementation):
        name = traversal_cls.__name__.lstrip("_")

        def __init__(self):
            self.traversal = traversal_cls()

    Planted.__name__ = Planted.__qualname__ = Planted.name
    return Planted


DuplicateSharedState = _impl(_DedupByModule)
LastOwner = _impl(_LastOwner)
BreadthFirst = _impl(_BreadthFirst)
RegistryOrder = _impl(_RegistryOrder)
UnprunedFastPath = _impl(_UnprunedFastPath)
EntersReplicate = _impl(_EntersReplicate)
KeepsReplicateState = _impl(_KeepsReplicateState)
ReversedChildren = _impl(_ReversedChildren)
HandlesPostOrder = _impl(_HandlesPostOrder)
SeedEraHandles = _impl(_SeedEraHandles)
UnfilteredRoots = _impl(_UnfilteredRoots)
Recursive = _impl(_Recursive)
ListVisited = _impl(_ListVisited)
MarksVisited = _impl(_MarksVisited)
LeaksDefaultDtype = _impl(_LeaksDefaultDtype)

_SWM = "test_states_with_modules"
#: spec -> (invariant it must fail, or a tuple of which at least one must,
#: -k expression selecting the tests that show it)
PLANTED = {
    "tests.planted.traversal:DuplicateSharedState": ("TRV-1", _SWM),
    "tests.planted.traversal:LastOwner": ("TRV-2", _SWM),
    "tests.planted.traversal:RegistryOrder": ("TRV-3", _SWM),
    "tests.planted.traversal:UnprunedFastPath": ("TRV-5", _SWM),
    # A wrong visiting order shows as a wrong first owner (TRV-2) or a wrong
    # state order (TRV-3), depending on the first failing example.
    "tests.planted.traversal:BreadthFirst": (("TRV-2", "TRV-3"), _SWM),
    "tests.planted.traversal:EntersReplicate": ("TRV-4", _SWM),
    "tests.planted.traversal:KeepsReplicateState": ("TRV-4", _SWM),
    "tests.planted.traversal:ReversedChildren": (("TRV-2", "TRV-3"), _SWM),
    "tests.planted.traversal:HandlesPostOrder": ("TRV-6", "test_handles"),
    "tests.planted.traversal:SeedEraHandles": ("TRV-6", "test_handles"),
    "tests.planted.traversal:UnfilteredRoots": ("TRV-7", "test_root_states"),
    # The 100k-module wide tree costs seconds per call and recursion is not depth-limited there.
    "tests.planted.traversal:Recursive": ("TRV-8", "test_large_trees and not wide"),
    "tests.planted.traversal:ListVisited": ("TRV-8", "test_linear_growth"),
    "tests.planted.traversal:MarksVisited": ("TRV-9", _SWM),
}
