"""Reference FSDP2 walk (FS2): which modules ``fully_shard`` manages, the
states it collects from them, and the Dynamo flags it sets on them.

Written from DESIGN.md (FS2-1..8); iterative throughout, linear in modules.

- Roots: a group given as several modules keeps only the outermost ones (a
  root below another root is part of that root's walk), in the order given.
  That is torch's documented rule for ``fully_shard([a, b, ...])``: the
  composable contract and ``_get_modules_and_states`` reduce the list to its
  root modules (``torch.distributed.utils._get_root_modules``: those not
  below another given module) before the walk. torch's private walk
  ``_get_managed_modules``, handed nested roots directly, would walk the
  inner one again and list it twice; no caller does that (and a module given
  twice is rejected by the contract), so it is neither specified nor a bug.
- Walk: post-order DFS from each root, children in registration order (each
  child once however many names it has), each module once over the whole
  group; never entering a module owned by an incompatible API (``replicate``)
  nor a non-root module that has its own FSDP2 state.
- Ignore rule (only when ``ignored_params`` is not ``None``): a managed module
  is dropped when it has no buffers, all its own parameters are ignored, and
  every child (all registered children, managed or not) is dropped by the
  same rule.
- States: own parameters then own buffers of each managed module in order,
  each tensor once, ignored parameters absent; a scalar parameter is a
  ``ValueError`` naming it.
- Shards (FS2-10): a group's parameters, in states order, are split on dim 0
  over the mesh's last (sharding) dimension of S ranks as ``torch.chunk``
  splits: ``ceil(d / S)`` rows per rank, the last ranks short or empty,
  every rank's storage padded to ``ceil(d / S)`` rows.
- ``annotate``: a root that an earlier call already gave a group of its own
  (whatever that group manages), then a module or parameter already managed
  by an earlier group, is a ``ValueError`` naming it; otherwise every managed module gets
  ``_is_fsdp_managed_module = True`` and ``_fsdp_use_orig_params = True`` and
  the roots get their own FSDP2 state.
"""

from __future__ import annotations

import weakref

INCOMPATIBLE_APIS = frozenset({"replicate"})

#: what torch 2.13 raises when an earlier group's sharded (DTensor) parameter
#: reaches a later group (``fully_shard`` takes it for a tensor-parallel one)
TORCH_DTENSOR_ERROR = "Invariant encountered: value was None when it should not be"

#: what torch's composable ``contract`` raises (an ``AssertionError``, before
#: fully_shard runs) for a root that fully_shard was already applied to; the
#: module follows only as its repr
TORCH_REAPPLY_ERROR = (
    "Each distinct composable distributed API can only be applied to a module once. "
    "fully_shard has already been applied to the following module:\n{module!r}"
)


#: what torch 2.3-2.11's ``fully_shard`` raises for any ``nn.ModuleList`` or
#: ``nn.ModuleDict`` given as its module, one with a forward of its own too
#: (``fs2-container-with-forward-rejected``); the module follows as its repr
TORCH_CONTAINER_ERROR = "fully_shard does not support containers that do not implement forward: {module}"


def _is_container(module) -> bool:
    from torch import nn

    return isinstance(module, (nn.ModuleList, nn.ModuleDict))


def _own_forward(module) -> bool:
    from torch import nn

    return type(module).forward is not nn.Module.forward


def unique_children(module) -> list:
    """``module.children()``: registration order, a module registered under
    two names once."""
    seen, out = set(), []
    for child in module._modules.values():
        if child is not None and id(child) not in seen:
            seen.add(id(child))
            out.append(child)
    return out


def own_params(module) -> list:
    """``named_parameters(recurse=False)``: ``(name, param)``, each param once."""
    seen, out = set(), []
    for name, p in module._parameters.items():
        if p is not None and id(p) not in seen:
            seen.add(id(p))
            out.append((name, p))
    return out


def own_buffers(module) -> list:
    seen, out = set(), []
    for b in module._buffers.values():
        if b is not None and id(b) not in seen:
            seen.add(id(b))
            out.append(b)
    return out


def descendants(roots) -> set:
    """ids of every module strictly below any of ``roots`` (iterative)."""
    below, stack = set(), []
    for r in roots:
        stack.extend(unique_children(r))
    while stack:
        m = stack.pop()
        if id(m) in below:
            continue
        below.add(id(m))
        stack.extend(unique_children(m))
    return below


def outermost_roots(roots) -> list:
    roots = list(dict.fromkeys(roots))  # modules hash by identity
    if len(roots) < 2:
        return roots
    below = descendants(roots)
    return [r for r in roots if id(r) not in below]


def qualified_name(roots, target) -> str:
    """A name for ``target`` relative to ``roots``: ``roots[i]`` for a root,
    else ``roots[i].c0.c1`` (breadth first: a shortest path)."""
    for i, r in enumerate(roots):
        if r is target:
            return f"roots[{i}]"
    queue, seen = [(f"roots[{i}]", r) for i, r in enumerate(roots)], set()
    head = 0
    while head < len(queue):
        path, m = queue[head]
        head += 1
        for name, child in m._modules.items():
            if child is None or id(child) in seen:
                continue
            if child is target:
                return f"{path}.{name}"
            seen.add(id(child))
            queue.append((f"{path}.{name}", child))
    return type(target).__name__


class ReferenceFsdp2:
    """Keeps FSDP2 states and incompatible marks beside the modules (weakly)."""

    def __init__(self, recursive: bool = False, group_conflicts: str = "reject", scalar_params: str = "reject",
                 reapply: str = "reject", containers: str = "by_forward"):
        """Switches modelling known torch bugs (``pytest_fsdpcheck.known``):

        ``recursive=True``: torch's walk (``_get_managed_modules``'s inner
        ``dfs``), ignore rule (``_ignore_module``) and root reduction
        (``_get_root_modules``, via ``Module.modules()``) are recursive, so
        deep trees raise ``RecursionError`` (FS2-6).

        ``group_conflicts="torch"``: ``fully_shard`` does not look for
        modules or parameters an earlier group already manages (FS2-8).
        Like torch, each call registers a new parameter object in place of
        each one it shards, under every name below its roots that holds it
        (an alias outside them keeps the original): later calls' ignored
        parameters and conflicts are about those objects. A call whose
        states hold an earlier call's new parameter raises torch's
        ``TypeError`` (the DTensor is mistaken for a tensor-parallel one);
        an ignored one is no state, so it is accepted, as is anything else:
        managed twice, silently.

        ``scalar_params="accept"``: the states collected include scalar
        (0-dim) parameters, which fully_shard cannot shard (FS2-4).

        ``reapply="torch"``: a root that an earlier ``annotate`` already gave
        a group of its own raises torch's ``AssertionError`` from the
        composable ``contract`` (naming the module by its repr only), before
        anything else is looked at (FS2-8).

        ``containers="torch"``: a ``nn.ModuleList`` or ``nn.ModuleDict``
        given alone (not in a list) raises torch 2.3-2.11's ``ValueError``
        whether or not its class has a forward of its own (FS2-7); the spec
        (``"by_forward"``) refuses only one without (torch 2.12 on) and takes
        one that has, like any module.
        """
        if containers not in ("by_forward", "torch"):
            raise ValueError(f"containers must be 'by_forward' or 'torch', got {containers!r}")
        self._containers = containers
        if group_conflicts not in ("reject", "torch"):
            raise ValueError(f"group_conflicts must be 'reject' or 'torch', got {group_conflicts!r}")
        if scalar_params not in ("reject", "accept"):
            raise ValueError(f"scalar_params must be 'reject' or 'accept', got {scalar_params!r}")
        if reapply not in ("reject", "torch"):
            raise ValueError(f"reapply must be 'reject' or 'torch', got {reapply!r}")
        self._reapply = reapply
        self._accept_scalars = scalar_params == "accept"
        self._recursive = recursive
        self._group_conflicts = group_conflicts
        self._own_group = weakref.WeakKeyDictionary()
        self._marks = weakref.WeakKeyDictionary()
        # what earlier annotate calls managed / sharded
        self._managed_by = weakref.WeakKeyDictionary()  # module -> group number
        self._group_params: dict[int, int] = {}  # id(param) -> group number
        self._params_alive: list = []  # keeps ids above and below valid
        self._sharded: set[int] = set()  # ids of the parameters torch mode registered in place of sharded ones
        self._groups = 0
        # roots an earlier annotate gave a group (mark_own_group only models one)
        self._applied = weakref.WeakKeyDictionary()  # module -> group number
        # per group made by annotate: (roots, [(module, name, param)]) and the
        # mesh's sharding dimension as (this rank's index, ranks) (FS2-10),
        # held weakly: the area lives for the session, the models per test
        self._made_groups: list = []

    # --- marks ---------------------------------------------------------------

    def mark_own_group(self, module) -> None:
        self._own_group[module] = True

    def mark_incompatible(self, module, api) -> None:
        self._marks.setdefault(module, set()).add(api)

    def _composable(self, module) -> bool:
        return not (self._marks.get(module, set()) & INCOMPATIBLE_APIS)

    # --- walk ----------------------------------------------------------------

    def managed_modules(self, roots, ignored_params):
        roots = self._roots(roots)
        root_ids = {id(r) for r in roots}
        visited: set[int] = set()
        out: list = []

        def enter(module) -> bool:
            if not self._composable(module):
                return False
            if id(module) not in root_ids and module in self._own_group:
                return False
            visited.add(id(module))
            return True

        for root in roots:
            if id(root) in visited:
                continue
            if self._recursive:
                self._dfs_recursive(root, enter, visited, out)
                continue
            if not enter(root):
                continue
            stack = [(root, iter(unique_children(root)))]
            while stack:
                module, kids = stack[-1]
                for child in kids:
                    if id(child) not in visited and enter(child):
                        stack.append((child, iter(unique_children(child))))
                        break
                else:
                    stack.pop()
                    out.append(module)
        if ignored_params is None:
            return out
        ignored = {id(p) for p in ignored_params}
        memo: dict[int, bool] = {}
        return [m for m in out if not self._ignorable(m, ignored, memo)]

    def _roots(self, roots):
        roots = list(roots)
        if self._recursive and len(roots) > 1:
            # torch: set(module.modules()) per root, a recursive generator
            below = set()
            for r in roots:
                below.update(id(m) for m in r.modules() if m is not r)
            return [r for r in dict.fromkeys(roots) if id(r) not in below]
        return outermost_roots(roots)

    def _dfs_recursive(self, module, enter, visited, out):
        if not enter(module):
            return
        for child in unique_children(module):
            if id(child) not in visited:
                self._dfs_recursive(child, enter, visited, out)
        out.append(module)

    @staticmethod
    def _own_ignorable(module, ignored) -> bool:
        if own_buffers(module):
            return False
        return all(id(p) in ignored for _, p in own_params(module))

    def _ignorable(self, module, ignored, memo) -> bool:
        if self._recursive:
            return self._ignorable_recursive(module, ignored, memo)
        stack = [module]
        while stack:
            m = stack[-1]
            if id(m) in memo:
                stack.pop()
                continue
            if not self._own_ignorable(m, ignored):
                memo[id(m)] = False
                stack.pop()
                continue
            kids = unique_children(m)
            pending = [c for c in kids if id(c) not in memo]
            if pending:
                stack.extend(reversed(pending))
            else:
                memo[id(m)] = all(memo[id(c)] for c in kids)
                stack.pop()
        return memo[id(module)]

    def _ignorable_recursive(self, m, ignored, memo) -> bool:
        if id(m) in memo:
            return memo[id(m)]
        result = self._own_ignorable(m, ignored) and all(
            self._ignorable_recursive(c, ignored, memo) for c in unique_children(m)
        )
        memo[id(m)] = result
        return result

    # --- states --------------------------------------------------------------

    def managed_states(self, modules, ignored_params):
        ignored = {id(p) for p in ignored_params} if ignored_params is not None else set()
        params, buffers, seen_p, seen_b = [], [], set(), set()
        for module in modules:
            for name, p in own_params(module):
                if id(p) in ignored or id(p) in seen_p:
                    continue
                if p.dim() == 0 and not self._accept_scalars:
                    raise ValueError(
                        f"fully_shard does not support scalar parameters: {name!r} of "
                        f"{type(module).__name__} has shape (); make it a 1-D tensor of one element"
                    )
                seen_p.add(id(p))
                params.append(p)
            for b in own_buffers(module):
                if id(b) not in seen_b:
                    seen_b.add(id(b))
                    buffers.append(b)
        return params, buffers

    # --- a real fully_shard, as specified ---------------------------------------

    def annotate(self, roots, mesh, ignored_params):
        roots = tuple(roots)
        if len(roots) == 1 and _is_container(roots[0]) and (self._containers == "torch" or not _own_forward(roots[0])):
            # a container alone, as torch validates its one module argument
            # (a list of modules is not looked into)
            raise ValueError(TORCH_CONTAINER_ERROR.format(module=roots[0]))
        managed = self.managed_modules(roots, ignored_params)
        params, _ = self.managed_states(managed, ignored_params)
        param_ids = {id(p) for p in params}
        # torch's contract looks at the outermost roots before fully_shard runs
        for r in outermost_roots(roots):
            if r not in self._applied:
                continue
            if self._reapply == "torch":
                raise AssertionError(TORCH_REAPPLY_ERROR.format(module=r))
            raise ValueError(
                f"fully_shard: module {qualified_name(roots, r)} already holds a fully_shard group of its own "
                f"(group {self._applied[r]}); fully_shard applies to a module once"
            )
        if self._group_conflicts == "reject":
            for module in managed:
                if module in self._managed_by:
                    raise ValueError(
                        f"fully_shard: module {qualified_name(roots, module)} is already managed by "
                        f"another fully_shard group (group {self._managed_by[module]})"
                    )
            for module in managed:
                for name, p in own_params(module):
                    if id(p) in param_ids and id(p) in self._group_params:
                        raise ValueError(
                            f"fully_shard: parameter {qualified_name(roots, module)}.{name} is already "
                            f"managed by another fully_shard group (group {self._group_params[id(p)]})"
                        )
        elif any(id(p) in self._sharded for p in params):
            raise TypeError(TORCH_DTENSOR_ERROR)
        self._groups += 1
        group = self._groups
        for r in outermost_roots(roots):
            self.mark_own_group(r)
            self._applied[r] = group
        for module in managed:
            self._managed_by.setdefault(module, group)
            module._is_fsdp_managed_module = True
            module._fsdp_use_orig_params = True
        for p in params:
            self._group_params.setdefault(id(p), group)
        self._params_alive.extend(params)
        self._made_groups = [g for g in self._made_groups if all(r() is not None for r in g[0])]
        self._made_groups.append((
            [weakref.ref(r) for r in outermost_roots(roots)],
            [(weakref.ref(m), name, weakref.ref(p)) for m, name, p in self._registered(managed, param_ids)],
            shard_coordinate(mesh),
        ))
        if self._group_conflicts == "torch":
            self._register_sharded(outermost_roots(roots), params)

    @staticmethod
    def _registered(managed, param_ids) -> list:
        """``(module, name, param)`` for each state parameter, at the first
        managed module registering it."""
        out, seen = [], set()
        for module in managed:
            for name, p in own_params(module):
                if id(p) in param_ids and id(p) not in seen:
                    seen.add(id(p))
                    out.append((module, name, p))
        return out

    def sharded_groups(self, modules):
        """FS2-10: each group ``annotate`` made (on any of ``modules``) as this
        rank holds it: its rows of each parameter's dim 0 and the padded rows."""
        from ..contract import ShardedGroup, ShardedParam

        wanted = {id(m) for m in modules}
        out = []
        for root_refs, registered, (rank, ranks) in self._made_groups:
            roots = [r() for r in root_refs]
            if any(r is None for r in roots) or not any(id(r) in wanted for r in roots):
                continue
            group = ShardedGroup(roots)
            for module_ref, name, param_ref in registered:
                module, p = module_ref(), param_ref()
                if module is None or p is None:
                    continue
                rows = p.shape[0]
                chunk = -(-rows // ranks)
                start = min(rank * chunk, rows)
                local = p.detach()[start:min(start + chunk, rows)]
                group.params.append(ShardedParam(module, name, local, chunk))
            out.append(group)
        return out

    def _register_sharded(self, roots, params) -> None:
        """torch's ``FSDPParam`` sets its sharded parameter on every module
        below the group's roots that registers the original (found by
        ``named_modules``, other groups' and ignored modules included) and
        nowhere else. Torch mode models it because the objects decide the
        outcome of later calls: an ignored parameter resolved after this
        call is the new one while an alias outside the roots still holds
        the original, and only the new one is a DTensor."""
        from torch import nn

        new = {id(p): nn.Parameter(p.detach(), requires_grad=p.requires_grad) for p in params}
        self._sharded.update(id(q) for q in new.values())
        self._params_alive.extend(new.values())
        seen, stack = set(), list(roots)
        while stack:
            module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            for name in [n for n, p in module._parameters.items() if p is not None and id(p) in new]:
                module._parameters[name] = new[id(module._parameters[name])]
            stack.extend(unique_children(module))


def shard_coordinate(mesh) -> tuple[int, int]:
    """(this rank's index, ranks) along the mesh's last dimension, the one
    fully_shard shards over (a 2-D HSDP mesh replicates over the first)."""
    if mesh is None:
        return 0, 1
    last = mesh.ndim - 1
    return mesh.get_local_rank(last), mesh.size(last)
