"""Reference Dynamo annotation (ANN): every module reachable from the root,
ignored ones excepted, is marked managed. Ignoring a module does not ignore
its descendants (the seed's rule)."""

from __future__ import annotations

from .traversal import iter_children


class ReferenceAnnotation:
    def annotate(self, root, ignored_modules, use_orig_params):
        ignored = {id(m) for m in ignored_modules}
        seen = set()
        stack = [root]
        while stack:
            module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            if id(module) not in ignored:
                module._is_fsdp_managed_module = True
                module._fsdp_use_orig_params = use_orig_params
            stack.extend(iter_children(module))
