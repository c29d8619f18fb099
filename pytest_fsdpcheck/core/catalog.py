"""The invariant catalog of DESIGN.md: stable IDs and one-line statements.

Tests, reports, divergence files and docs all refer to these IDs.
"""

INVARIANTS: dict[str, str] = {
    # Traversal
    "TRV-1": "no state is listed twice",
    "TRV-2": "modules[i] owns states[i], same lengths, first owner reached",
    "TRV-3": "DFS pre-order, registration order, never entering a replicate module",
    "TRV-4": "complete: every reachable, non-pruned state listed, nothing else",
    "TRV-5": "without incompatible marks, module order is root.modules() filtered",
    "TRV-6": "handles are the states' handles, flattened in state order",
    "TRV-7": "root states are exactly the states with _is_root, in state order",
    "TRV-8": "deep, wide and diamond-chain trees: no RecursionError, linear time",
    "TRV-9": "the tree is not mutated",
    # Annotation
    "ANN-1": "every non-ignored module is marked managed with the use_orig_params flag",
    "ANN-2": "ignored modules are left as they were",
    "ANN-3": "descendants of an ignored module are still annotated",
    "ANN-4": "nothing else changes",
    "ANN-5": "idempotent; re-annotating updates use_orig_params",
    "ANN-6": "shared submodules are annotated consistently",
    "ANN-7": "Dynamo lifts an annotated module's parameters; swapping one needs no recompile",
    "ANN-8": "compiled with dynamic=True, an annotated module loses no specialisation the plain one keeps",
    # Splitting
    "SPL-1": "first_bucket_cap > bucket_bytes_cap rejected; unset first cap defaults",
    "SPL-2": "every node in exactly one bucket; contiguous runs in graph order",
    "SPL-3": "bucket size is the bytes of trainable, non-ignored parameters it uses",
    "SPL-4": "each parameter counted once in the whole plan",
    "SPL-5": "a bucket closes at the first point with size >= cap and an external output",
    "SPL-6": "one output per bucket: every submodule has an output used outside it",
    "SPL-7": "extended buckets report the ops and bytes they absorbed",
    "SPL-8": "a parameter-free earliest bucket is fused; no bucket is parameter-free",
    "SPL-9": "one bucket: the original graph is compiled once, unsplit",
    "SPL-10": "k > 1 buckets: k backend calls, right inputs, tuple outputs, Dynamo metadata kept",
    "SPL-11": "the split module computes the same outputs and gradients",
    "SPL-12": "the original graph module still computes what it did",
    "SPL-13": "the logged bucket table matches the buckets",
    "SPL-14": "higher-order ops are split correctly or rejected with NotImplementedError",
    "SPL-15": "module-chain plans agree with DDP's own bucket assignment",
    "SPL-16": "end to end with real DDP: one compiled subgraph per bucket, gradients equal to a control of plain all_reduce",
    "SPL-17": "each bucket's compile gets example inputs laid out as the run's: shape, strides, dtype, device, requires_grad; inside Dynamo, its symbolic sizes",
    "SPL-18": "compiling the buckets fires no user saved-tensors hook and keeps the caller's grad mode and autocast state",
    "SPL-19": "the compiler configs the split is asked to compile with reach every backend call",
    "SPL-20": "every rank of a real world plans the same buckets (nodes per bucket, per graph)",
    # Exec order
    "EXO-1": "the tracer is restored after the context exits, also on exceptions",
    "EXO-2": "module forward order: root first, then every call in order",
    "EXO-3": "parameter order: first use only, equal to an independent oracle",
    "EXO-4": "usage infos: own direct uses and children's calls, last call kept",
    "EXO-5": "visited set equals the ordered parameters",
    "EXO-6": "the traced graph equals an unpatched tracer's",
    "EXO-7": "works with tracer subclasses and concrete_args",
    "EXO-8": "linear time in module calls and parameters",
    "EXO-9": "every rank of a real world records the same module and parameter exec order",
    # FSDP2 (fully_shard)
    "FS2-1": "managed modules: post-order DFS from each root in order, registration order, each once",
    "FS2-2": "never entering a non-composable module nor a non-root module with its own FSDP2 state",
    "FS2-3": "ignored parameters drop exactly the modules torch's ignore rule names",
    "FS2-4": "states: params and buffers in managed-module order, each once, ignored absent; scalars rejected",
    "FS2-5": "several roots: shared modules listed once; nested roots handled as torch documents",
    "FS2-6": "deep, wide and diamond-chain trees: no RecursionError, linear time",
    "FS2-7": "after a real fully_shard, exactly the managed modules carry the Dynamo flags; nothing else changes, and the model is freed once dropped",
    "FS2-8": "a module or parameter shared with another group's subtree is rejected with a clear error naming it",
    "FS2-9": "world size >= 2 (and 3, uneven dims): fully_shard driven by the walk shards what it should; one step's gradients, each rank's shard after the optimizer step and the next forward equal the unsharded model's, eager, compiled and with a bf16 group frozen at its first forward",
    "FS2-10": "simulated worlds (8 to 1024 ranks, HSDP): each parameter in one group, each rank's dim-0 rows as torch.chunk gives them, padded only on the last ranks; every rank agrees",
    "FS2-11": "every rank of a real world manages the same modules and parameters in each fully_shard call",
    "FS2-12": "a group's frozen parameters of other dtypes (a bf16 base, an integer index) take a mixed-precision step as the control does",
    "FS2-13": "turning a group's gradient reduction off (set_requires_gradient_sync) reaches exactly the groups asked",
    "FS2-14": "a view a group returns, written into in place by its caller, takes the step the unsharded model takes",
    "FS2-15": "on a 2-D (dp, tp) mesh, tensor-parallel parameters grouped over dp take the unsharded model's step: each sharded over dp, each gradient summed over tp and averaged over dp in the policy's reduce_dtype",
    # A user's FSDP2 plan (its fully_shard calls, recorded): the plan's own
    # mistakes, each the user's (a case error naming the factory, exit 11),
    # never a cell in an implementation's column
    "PLN-1": "tied parameters (one Parameter registered by several modules) are managed by one group",
    "PLN-2": "no module or parameter is reachable from two groups (managed twice)",
    "PLN-3": "every trainable parameter of the model the step trains (added after the plan's calls too) is in a group or ignored (or owned by replicate)",
    "PLN-4": "groups are applied inner first: no call after one whose subtree contains it; the model's root last",
    "PLN-5": "a trainable parameter in ignored_params is one the case names as reduced by the framework (unreduced)",
}

AREA_PREFIX = {"traversal": "TRV", "annotation": "ANN", "splitting": "SPL", "exec_order": "EXO", "fsdp2": "FS2"}
AREAS = tuple(AREA_PREFIX)
#: invariant families checked within an area above: a plan's own mistakes
#: (PLN) are judged wherever an implementation provides fully_shard
SUB_PREFIX = {"PLN": "fsdp2"}


def area_of(invariant_id: str) -> str:
    prefix = invariant_id.split("-", 1)[0]
    if prefix in SUB_PREFIX:
        return SUB_PREFIX[prefix]
    for area, p in AREA_PREFIX.items():
        if p == prefix:
            return area
    raise KeyError(invariant_id)


def sort_key(invariant_id: str) -> tuple[int, int]:
    prefix, _, number = invariant_id.partition("-")
    return ([*AREA_PREFIX.values(), *SUB_PREFIX].index(prefix), int(number))
