"""Known bugs of the installed torch, as the ``torch`` implementation declares them.

Each range is what was measured by running the bug's reproducer on every
torch minor release from 2.0 to 2.15 (latest patch of each, Python 3.11).
A range left open at the top means the bug was present in the newest release
measured; on a newer torch the suite keeps looking for it and reports
"not reproduced — fixed?" if it no longer shows.
"""

from __future__ import annotations

from ..core.bugs import KnownBug
from .torch_bug_signatures import (
    float_partition_output,
    frozen_dtypes_asserted,
    grouped_module_reused,
    grouped_module_reused_summed,
    inplace_view_hook_dropped,
    int_attributes_lifted,
    int_param_rejected,
    mixed_step_latched,
    model_kept_alive,
    sharded_gradients_summed_on_gloo,
    tp_reduced_in_compute_dtype,
    unused_params_graphs_differ,
)

#: releases the history command runs on a CPU machine under Python 3.11, and what they cannot show there
_NO_COMPILE_HERE = {"2.0.1": "torch 2.0's torch.compile refuses Python 3.11, which the history runs on: no compiled "
                             "check runs there"}
_NO_CPU_STEP_HERE = {r: "fully_shard's runtime takes a CPU step from 2.7 (2.3 ... 2.6 need CUDA streams): the step "
                        "that shows it is n/p on the CPU machine the history runs on"
                     for r in ("2.3.1", "2.4.1", "2.5.1", "2.6.0")}

TORCH_BUGS: tuple[KnownBug, ...] = (
    KnownBug(
        id="trv-root-states-walk-modules",
        invariants=("TRV-7", "TRV-8"),
        reason="torch.distributed.fsdp._runtime_utils._get_fsdp_root_states_with_modules walks "
        "module.modules() instead of the FSDP traversal: it enters modules marked `replicate` "
        "(returning root states inside them) and recurses, so a few thousand levels raise RecursionError.",
        affects=">=2.0",
        seen=("2.0.1", "2.15.0"),
        reference={"traversal": {"root_states_walk": "modules"}},
        reproducer="trv-root-states-walk-modules.py",
    ),
    KnownBug(
        id="trv-registry-created-on-read",
        invariants=("TRV-9",),
        reason="torch.distributed._composable.contract._get_registry stores an empty composable "
        "registry on a module that has none, and _traversal_utils._composable calls it for every "
        "module the traversal visits: collecting states adds an attribute to every visited module "
        "but one marked by a composable API such as `replicate`, which holds its own.",
        affects="<2.2",
        seen=("2.0.1", "2.1.2"),
        reference={"traversal": {"registry_on_read": True}},
        reproducer="trv-registry-created-on-read.py",
        upstream=("pytorch/pytorch#113654",),
    ),
    KnownBug(
        id="spl-param-counted-per-node",
        invariants=("SPL-4",),
        reason="DDPOptimizer.compile_fn adds a parameter's bytes at every call_module and get_attr "
        "node that reads it, with no de-duplication at all: a module called twice, tied weights, or "
        "a parameter read by two get_attr nodes is counted twice.",
        affects="<2.4",
        seen=("2.0.1", "2.3.1"),
        reference={"splitting": {"count_each_param": "per_node"}},
        reproducer="spl-param-counted-per-node.py",
        forms=("module",),
    ),
    KnownBug(
        id="spl-param-counted-per-use",
        invariants=("SPL-4",),
        reason="DDPOptimizer.compile_fn adds a parameter's bytes at every call_function/call_method "
        "(add_param_args) or get_attr node that reads it; only call_module targets are de-duplicated "
        "(processed_modules). Tied weights, a parameter read by two nodes, and (Dynamo form) a module "
        "called twice are counted twice.",
        affects=">=2.4",
        seen=("2.4.1", "2.15.0"),
        reference={"splitting": {"count_each_param": "per_use"}},
        reproducer="spl-param-counted-per-use.py",
    ),
    KnownBug(
        id="spl-method-receiver-module-counted",
        invariants=("SPL-3",),
        reason="DDPOptimizer.compile_fn (from 2.4) looks up `node.args[0].target` of every call_method "
        "node as a submodule and adds that module's parameters there: in `self.lin(x).mul(p)` the "
        "Linear's bytes land in the bucket of the later `mul` node instead of the module call. The code "
        "is still there in later releases, and module-form graphs (all Dynamo produced on 2.4; a fork, a "
        "direct caller or inline_inbuilt_nn_modules=False later) reach it.",
        affects=">=2.4",
        seen=("2.4.1", "2.15.0"),
        forms=("module",),
        reference={"splitting": {"method_receiver": "module_counted"}},
        reproducer="spl-method-receiver-module-counted.py",
    ),
    KnownBug(
        id="spl-bucket-closes-without-output",
        invariants=("SPL-5", "SPL-6", "SPL-7"),
        reason="torch 2.0's DDPOptimizer.compile_fn starts a new bucket as soon as the current one "
        "reaches its cap, whether or not any of its nodes is used outside it (later releases extend "
        "the bucket to an external output): a split submodule can have no output.",
        affects="<2.1",
        seen=("2.0.1", "2.0.1"),
        reference={"splitting": {"close_at_cap": "always"}},
        reproducer="spl-bucket-closes-without-output.py",
        upstream=("pytorch/pytorch#103488",),
    ),
    KnownBug(
        id="spl-attr-read-taken-as-output",
        invariants=("SPL-5", "SPL-6", "SPL-7"),
        reason="DDPOptimizer.compile_fn (bucket_has_external_output) takes a get_attr node read by a "
        "later bucket for the current bucket's output and closes the bucket there; but split_module "
        "keeps get_attr nodes in the parent graph, so that bucket's submodule has no output. On "
        "2.1-2.5 DDPOptimizer's fake-tensor copy of the submodule then fails an assert in fx's "
        "Graph.__deepcopy__, and later releases return a split graph with an output-less submodule. "
        "(torch 2.0 closes a full bucket without looking for an output at all: "
        "spl-bucket-closes-without-output.)",
        affects=">=2.1",
        seen=("2.1.2", "2.15.0"),
        reference={"splitting": {"attr_outputs": "counted"}},
        reproducer="spl-attr-read-taken-as-output.py",
    ),
    KnownBug(
        id="spl-method-arg-receiver-not-str",
        invariants=("SPL-3",),
        reason="DDPOptimizer.compile_fn counts a call_method node's parameter arguments only when "
        "`isinstance(node.args[0].target, str)`: in `torch.tanh(h).mul(p)` the receiver comes from a "
        "call_function node, so p is not counted and the bucket is too small.",
        affects=">=2.5",
        seen=("2.5.1", "2.15.0"),
        reference={"splitting": {"method_args": "string_receiver_only"}},
        reproducer="spl-method-arg-receiver-not-str.py",
        # module form reads parameters at their get_attr nodes, not as arguments
        forms=("dynamo",),
    ),
    KnownBug(
        id="spl-ddp-ignored-lost-on-fake",
        invariants=("SPL-3",),
        reason="DDPOptimizer.add_param_args reads placeholder.meta['example_value'], a FakeTensor that "
        "does not carry the parameter's `_ddp_ignored` flag, so on a graph Dynamo really captured, "
        "DDP-ignored parameters are counted towards bucket sizes.",
        affects=">=2.5",
        seen=("2.5.1", "2.15.0"),
        reference={"splitting": {"ddp_ignored_from": "example_value"}},
        reproducer="spl-ddp-ignored-lost-on-fake.py",
        forms=("dynamo",),
    ),
    KnownBug(
        id="spl-split-submodules-lose-dynamo-metadata",
        invariants=("SPL-10",),
        reason="DDPOptimizer.compile_fn hands the backend the submodules fx's split_module made, which carry "
        "none of the captured graph's metadata: no `meta` (dynamo_flat_name_to_original_fqn, compile and "
        "backend ids), no `_param_name_to_source`, and placeholders without their `_dynamo_source`, so "
        "aot_autograd finds no static input indices and cudagraphs re-record on every call "
        "(pytorch/pytorch#140395). Fixed in 2.8 by propagate_metadata and propagate_dynamo_source "
        "(pytorch/pytorch#155746). The reproducer shows the bug on 2.4.1 and 2.7.1 and not on 2.13.0; the "
        "2.4.1-2.7.1 sources lack both functions, 2.8.0-2.13.0 have them, and the seed era splits the same way. "
        "Example inputs, call counts and the tuple outputs are right: only the metadata is lost.",
        affects="<2.8",
        seen=("2.4.1", "2.7.1"),
        reference={"splitting": {"submodule_metadata": "dropped"}},
        reproducer="spl-split-submodules-lose-dynamo-metadata.py",
        upstream=("pytorch/pytorch#140395", "pytorch/pytorch#155746"),
    ),
    KnownBug(
        id="spl-hop-body-metadata-clobbered",
        invariants=("SPL-10",),
        reason="DDPOptimizer.compile_fn's propagate_metadata (and propagate_dynamo_source) write the captured "
        "graph's meta and _param_name_to_source onto every top-level child graph module of the split module, "
        "which includes a higher-order op's body that split_module hoists there (wrap_body_N): the body's own "
        "meta is replaced (selective activation checkpointing keeps its policy there, _checkpoint_context_fn). "
        "Read in the source: the helpers arrive in 2.8.0 with pytorch/pytorch#155746; 2.13.0 restricts them to "
        "the partitions (split_gm.meta['partition_names'], pytorch/pytorch#179496).",
        affects=">=2.8,<2.13",
        seen=("2.12.1",),
        reference={"splitting": {"submodule_metadata": "every_child"}},
        reproducer="spl-hop-body-metadata-clobbered.py",
        upstream=("pytorch/pytorch#179496",),
    ),
    KnownBug(
        id="spl-backward-compiles-with-last-bucket-fw-metadata",
        invariants=("SPL-10",),
        reason="Before 2.9, DDPOptimizer left one forward metadata on Dynamo's TracingContext, the last "
        "bucket's: AOTAutograd compiles each bucket's backward lazily, at the first backward (static "
        "shapes), last bucket first, and every one of them was compiled against the last bucket's forward "
        "metadata (with inductor, the donated buffers of another graph). 2.9 keeps one per bucket "
        "(DDPOptimizerContext, Note 'DDPOptimizer and fw_metadata'). Run on 2.4.1; read in the source of "
        "2.5.1 … 2.9.1.",
        affects="<2.9",
        seen=("2.4.1", "2.4.1"),
        reference={"splitting": {"fw_metadata": "last_bucket"}},
        reproducer="spl-backward-compiles-with-last-bucket-fw-metadata.py",
        upstream=("pytorch/pytorch#160745",),
        needs_compile=True,
        unobservable=_NO_COMPILE_HERE,
    ),
    KnownBug(
        id="spl-get-attr-module-raises",
        invariants=("SPL-3", "SPL-9", "SPL-10", "SPL-11"),
        reason="Before 2.4, DDPOptimizer.compile_fn reads `requires_grad` off every get_attr target and has "
        "no branch for a call_method: a graph that calls a submodule through its forward "
        "(`self.lin.forward(x)`, which Dynamo captures as a get_attr of the module and a call_method "
        "`forward`) raises AttributeError (\"'Linear' object has no attribute 'requires_grad'\"), with one "
        "bucket or several. 2.4 counts the module's parameters at the call (pytorch/pytorch#121771). Read in "
        "the source of 2.0.1 … 2.3.1; run on 2.0.1.",
        affects="<2.4",
        seen=("2.0.1", "2.3.1"),
        forms=("module",),
        reference={"splitting": {"get_attr_modules": "requires_grad_read"}},
        reproducer="spl-get-attr-module-raises.py",
        upstream=("pytorch/pytorch#121771",),
    ),
    KnownBug(
        id="spl-get-attr-module-split-crashes",
        invariants=("SPL-10", "SPL-11", "SPL-12", "SPL-17"),
        reason="A graph calling a submodule through its forward (`self.lin.forward(x)`: a get_attr of the "
        "module, whose `example_value` Dynamo records as the module itself, and a call_method `forward`) "
        "split into several buckets with the get_attr in an earlier bucket than its call: DDPOptimizer "
        "hands the graph to torch.fx's split_module, which reads the free symbols of every value a "
        "partition passes on (record_cross_partition_use) and raises AssertionError ('cannot extract "
        "sympy expressions from Linear(...)') on the module. One bucket compiles. torch 2.4.1's Dynamo "
        "(nn-module inlining off, its default) captures that form; 2.13 and 2.15 inline the call and never "
        "give it. Run on 2.4.1, 2.13.0 and 2.15.0.",
        affects=">=2.4",
        seen=("2.4.1", "2.15.0"),
        forms=("module",),
        reference={"splitting": {"module_attr_meta": "seen"}},
        reproducer="spl-get-attr-module-split-crashes.py",
    ),
    KnownBug(
        id="spl-dynamic-bucket-fake-run-raises",
        invariants=("SPL-10", "SPL-11", "SPL-14", "SPL-17"),
        reason="Inside torch.compile with dynamic shapes, DDPOptimizer's SubmodCompiler.run_node runs each "
        "bucket a backend compiled without AOTAutograd (backend='eager', or any backend handing the submodule "
        "back) on fakes under the compile's fake mode, to give the next bucket its example inputs, with the "
        "python dispatcher as Dynamo left it. torch 2.8.0's Dynamo calls the backend with it off, so a bucket "
        "that views a tensor by symbolic sizes (a Linear on a 3-D input, a checkpointed block, flex attention) "
        "raises RuntimeError 'SymIntArrayRef expected to contain only concrete integers' from the meta kernel, "
        "and the compile fails. The same split with the python dispatcher on runs. Measured by its reproducer: "
        "present on 2.8.0, absent on 2.7.1 and 2.13.0.",
        affects=">=2.8,<2.9",
        seen=("2.8.0",),
        reference={"splitting": {"bucket_fake_run": "plain"}},
        raises=(("RuntimeError", r"SymIntArrayRef expected to contain only concrete integers"),),
        reproducer="spl-dynamic-bucket-fake-run-raises.py",
        needs_compile=True,
    ),
    KnownBug(
        id="spl-zero-byte-preamble-asserts",
        invariants=("SPL-3", "SPL-8"),
        reason="DDPOptimizer.compile_fn fuses a zero-byte earliest bucket (a parameter-free preamble) "
        "into the next one, and asserts that such a bucket lists no parameter: a trainable parameter "
        "of zero elements read there is listed but weighs no bytes, so the split raises "
        "AssertionError('Params should be empty if size is 0') instead of fusing the preamble with it. "
        "The fusion and this assertion are in compile_fn in every release read: the latest patch of each "
        "minor, 2.0.1 (the first with torch._dynamo) to 2.15.0 (an explicit raise instead of `assert` from "
        "2.13). The reproducer was run and fails on 2.0.1, 2.3.1, 2.4.1, 2.7.1, 2.13.0 and 2.15.0; the "
        "releases between were read, not run.",
        affects=">=2.0",
        seen=("2.0.1", "2.15.0"),
        reference={"splitting": {"zero_byte_preamble": "asserted"}},
        reproducer="spl-zero-byte-preamble-asserts.py",
    ),
    KnownBug(
        id="exo-patch-tracer-leaves-bound-methods",
        invariants=("EXO-1",),
        reason="torch.distributed.fsdp._trace_utils._ExecOrderTracer.patch_tracer restores by assigning "
        "the bound methods it read before patching (`tracer.call_module = orig_call_module`): the "
        "tracer instance's __dict__ keeps `call_module`/`create_proxy` bound methods that shadow the "
        "class and make a reference cycle.",
        affects=">=2.0",
        seen=("2.0.1", "2.15.0"),
        reference={"exec_order": {"restore": "assign_bound"}},
        reproducer="exo-patch-tracer-leaves-bound-methods.py",
    ),
    KnownBug(
        id="exo-param-keyword-unrecorded",
        invariants=("EXO-3", "EXO-4"),
        reason="_ExecOrderTracer._patched_create_proxy looks for parameter proxies only among the "
        "positional `args` of call_function/call_method: F.linear(x, weight=w) never records w.",
        affects=">=2.0",
        seen=("2.0.1", "2.15.0"),
        reference={"exec_order": {"scan_keyword_args": False}},
        reproducer="exo-param-keyword-unrecorded.py",
    ),
    KnownBug(
        id="exo-param-in-list-unrecorded",
        invariants=("EXO-3", "EXO-4"),
        reason="_ExecOrderTracer._patched_create_proxy does not look inside list/tuple arguments: "
        "torch.stack([x, w]) or torch.cat never records w.",
        affects=">=2.0",
        seen=("2.0.1", "2.15.0"),
        reference={"exec_order": {"scan_nested_args": False}},
        reproducer="exo-param-in-list-unrecorded.py",
    ),
    KnownBug(
        id="fs2-walk-recursive",
        invariants=("FS2-6",),
        reason="FSDP2's _fsdp_init._get_managed_modules walks with a recursive inner dfs (and "
        "_ignore_module and torch.distributed.utils._get_root_modules recurse too), so a module "
        "chain deeper than the recursion limit raises RecursionError instead of being walked.",
        affects=">=2.3",
        seen=("2.3.1", "2.15.0"),
        reference={"fsdp2": {"recursive": True}},
        reproducer="fs2-walk-recursive.py",
    ),
    KnownBug(
        id="fs2-group-conflict-not-rejected",
        invariants=("FS2-8",),
        reason="fully_shard does not look for modules or parameters that an earlier fully_shard "
        "group already manages. Each group registers its sharded (DTensor) parameter in place of "
        "the original under every name below its roots, and nowhere else; a later group whose "
        "states take such a parameter fails inside the DTensor or mesh code (an AssertionError "
        "about DP/TP meshes on 2.3-2.7, a TypeError on 2.11+). Anything else is silently managed "
        "by both groups: a parameter-free shared module, a shared module whose sharded "
        "parameters the later group ignores, a parameter tied across the groups (an alias "
        "outside the earlier group still holds the original).",
        affects=">=2.3",
        seen=("2.3.1", "2.15.0"),
        reference={"fsdp2": {"group_conflicts": "torch"}},
        reproducer="fs2-group-conflict-not-rejected.py",
        upstream=("pytorch/torchtitan#2817", "pytorch/pytorch#179532"),
        # What torch raises when the earlier group's sharded (DTensor) parameter
        # reaches the later group, which takes it for a tensor-parallel one:
        # _fsdp_param.FSDPParam._init_sharded_param's mesh checks (2.3-2.4
        # compare parent meshes, later releases root meshes and then ask for
        # named dims), and from 2.11 torch.utils._typing_utils.not_none.
        raises=(
            ("AssertionError", r"^FSDP requires the DP and TP mesh to have the same parent mesh"),
            ("AssertionError", r"^FSDP requires named DeviceMesh dims for ND parallelism"),
            ("TypeError", r"^Invariant encountered: value was None when it should not be$"),
        ),
    ),
    KnownBug(
        id="fs2-reapply-assertion",
        invariants=("FS2-8",),
        reason="fully_shard given a root that an earlier fully_shard already gave a group of its own (alone, "
        "or first, middle or last of several roots; with parameters or none) fails in the composable "
        "contract (torch.distributed._composable.contract), before fully_shard runs, with an AssertionError "
        "'Each distinct composable distributed API can only be applied to a module once' that names the "
        "module only by its repr, never by name. The contract check exists from the composable APIs on "
        "(an `assert` in the oldest copies read, `raise AssertionError` in later ones) and fully_shard is a "
        "@contract function from its first release (2.3), so the range is read from the source; the "
        "reproducer was run on 2.13 only.",
        affects=">=2.3",
        seen=("2.13.0",),
        reference={"fsdp2": {"reapply": "torch"}},
        reproducer="fs2-reapply-assertion.py",
        # the older `assert` words the first line "...following module." and
        # the later `raise` "...following module:"; the repr follows on the next lines
        raises=(
            ("AssertionError", r"^Each distinct composable distributed API can only be applied to a module once\. "
                               r"fully_shard has already been applied to the following module[.:]$"),
        ),
    ),
    KnownBug(
        id="fs2-scalar-param-accepted",
        invariants=("FS2-4",),
        reason="FSDP2's _fsdp_init._get_managed_states collects a scalar (0-dim) parameter without "
        "complaint; it cannot be sharded on dim 0, so fully_shard fails later, far from the module "
        "that holds it (later releases reject it there with a ValueError naming it).",
        affects=">=2.3,<2.5",
        seen=("2.3.1", "2.4.1"),
        reference={"fsdp2": {"scalar_params": "accept"}},
        reproducer="fs2-scalar-param-accepted.py",
        upstream=("pytorch/pytorch#132934",),
    ),
    KnownBug(
        id="fs2-container-with-forward-rejected",
        invariants=("FS2-7",),
        reason="fully_shard given one nn.ModuleList or nn.ModuleDict raises ValueError('fully_shard does not "
        "support containers that do not implement forward') also when the container's class has a forward of "
        "its own (a model's stage running its layers in turn), which is a module like any other: the check "
        "reads only isinstance(module, (nn.ModuleList, nn.ModuleDict)). Read in the source: in fully_shard "
        "itself 2.3.1 … 2.10.0, in _fsdp_init._validate_module in 2.11.0; 2.12 adds the test that the class's "
        "forward is nn.Module's (pytorch/pytorch#168905). A list of modules given to one call is not checked.",
        affects=">=2.3,<2.12",
        seen=("2.4.1",),
        reference={"fsdp2": {"containers": "torch"}},
        reproducer="fs2-container-with-forward-rejected.py",
        upstream=("pytorch/pytorch#167856", "pytorch/pytorch#168905"),
        raises=(("ValueError", r"^fully_shard does not support containers that do not implement forward: "),),
    ),
    KnownBug(
        id="fs2-state-mapping-keeps-modules",
        invariants=("FS2-7",),
        reason="torch.distributed._composable_state keeps a plain dict from every module given a composable state "
        "(each root of a fully_shard call, or of replicate) to that state, for the life of the process: a model "
        "given fully_shard is never freed after its caller drops it, nor its parameters. 2.6 holds both weakly "
        "(pytorch/pytorch#139650: 'Without this, del model does not free memory of a module with FSDP2 "
        "applied'). Read in the source: a Dict in 2.3.1 … 2.5.1, a WeakKeyDictionary of weak references from "
        "2.6.0.",
        affects=">=2.3,<2.6",
        seen=("2.4.1",),
        predicate=model_kept_alive,
        reproducer="fs2-state-mapping-keeps-modules.py",
        upstream=("pytorch/pytorch#139650",),
    ),
    KnownBug(
        id="fs2-frozen-dtypes-asserted",
        invariants=("FS2-12",),
        reason="FSDPParamGroup._init_mp_dtypes, at a group's lazy init (its first forward), requires one original "
        "dtype and one reduce dtype over all the group's parameters, frozen ones included, and raises "
        "AssertionError('FSDP expects uniform original parameter dtype but got {...}') for a frozen bf16 base "
        "beside trainable fp32 adapters or a frozen integer parameter, though frozen parameters are never "
        "reduced. Read in the source: every parameter 2.3.1 … 2.7.1; 2.8.0 reads the trainable ones only "
        "(pytorch/pytorch#154103, fixing #154082; the same change brought fs2-frozen-mp-latched). It is "
        "torch's runtime, not the walk: any implementation driving fully_shard meets it.",
        affects=">=2.3,<2.8",
        seen=("2.7.1",),
        predicate=frozen_dtypes_asserted,
        unobservable=_NO_CPU_STEP_HERE,
        reproducer="fs2-frozen-dtypes-asserted.py",
        upstream=("pytorch/pytorch#154082", "pytorch/pytorch#154103"),
        raises=(("AssertionError", r"^FSDP expects uniform original parameter dtype but got \{.*\}$"),),
    ),
    KnownBug(
        id="fs2-int-param-rejected",
        invariants=("FS2-12",),
        reason="fully_shard cannot shard a module holding an integer parameter (frozen, requires_grad False: an "
        "index): FSDPParam._init_sharded_param wraps the sharded DTensor in nn.Parameter with its default "
        "requires_grad=True before setting the original flag, and raises RuntimeError('Only Tensors of floating "
        "point and complex dtype can require gradients'). Read in the source: 2.3.1 … 2.11.0; 2.12 passes "
        "requires_grad to nn.Parameter and also keeps a non-floating parameter out of param_dtype's cast. It is "
        "torch's runtime, not the walk: any implementation driving fully_shard meets it.",
        affects=">=2.3,<2.12",
        seen=("2.7.1",),
        predicate=int_param_rejected,
        unobservable=_NO_CPU_STEP_HERE,
        reproducer="fs2-int-param-rejected.py",
        raises=(("RuntimeError", r"^[Oo]nly Tensors of floating point (and complex )?dtype can require gradients$"),),
        # reported against FSDPParam._init_sharded_param (#177844) and fixed by "[FSDP2] support non-float
        # parameters" (#177948), which also keeps non-float parameters out of param_dtype's cast
        upstream=("pytorch/pytorch#177844", "pytorch/pytorch#177948"),
    ),
    KnownBug(
        id="fs2-gloo-grads-summed",
        invariants=("FS2-9",),
        reason="fully_shard's gradient reduce-scatter (foreach_reduce in torch.distributed.fsdp."
        "_fully_shard._fsdp_collectives) on a gloo process group leaves sharded gradients summed over "
        "the ranks instead of averaged: every sharded gradient is world_size times the gradient of the "
        "mean loss (ignored parameters, which are not reduced, are right). It is torch's runtime, not "
        "the walk: any implementation driving fully_shard meets it; the torch implementation declares it.",
        affects=">=2.7,<2.9",
        seen=("2.7.1", "2.8.0"),
        predicate=sharded_gradients_summed_on_gloo,
        reproducer="fs2-gloo-grads-summed.py",
        upstream=("pytorch/pytorch#162338",),
        # FS2-9's world reuses a grouped module, so on 2.7 and 2.8 its summed gradients show beside that bug's
        # lines, which fs2-grouped-module-reused-summed reads; its reproducer shows it alone
        masked_by=("fs2-grouped-module-reused-summed",),
    ),
    KnownBug(
        id="fs2-frozen-mp-latched",
        invariants=("FS2-9",),
        reason="FSDPParamGroup._init_mp_dtypes (torch.distributed.fsdp._fully_shard._fsdp_param_group), run "
        "at the group's lazy init (its first forward), takes the group's original and reduce dtypes from the "
        "parameters that require grad at that moment only, and latches None where none does. A group with an "
        "mp_policy (bf16 parameters, fp32 reduction) frozen at its first forward and unfrozen for training "
        "then fails its first backward: the reduce-scatter hands the bf16 gradient back uncast, and torch "
        "2.13 raises \"attempting to assign a gradient with dtype 'c10::BFloat16' to a tensor with grad_dtype "
        "'Float'\". It is torch's runtime, not the walk: any implementation driving fully_shard meets it. "
        "Read in the source: 2.8.0 … 2.13.0 take the trainable parameters only (2.4 … 2.7 read every "
        "parameter); 2.14.0 takes them all again (PR 187376). Measured on 2.13.0 only; a release without "
        "the gradient-dtype check may show it as a reduction in bf16 instead, which this signature does "
        "not read.",
        affects=">=2.8,<2.14",
        seen=("2.13.0",),
        predicate=mixed_step_latched,
        reproducer="fs2-frozen-mp-latched.py",
        upstream=("pytorch/pytorch#186998", "pytorch/pytorch#187376"),
        # before 2.13 FS2-9's bf16 step (its grouped module reused) raises fs2-grouped-module-reused's
        # error in the forward, before the backward that would show the latch (its reproducer, which
        # reuses no module, shows it on 2.11.0 and 2.12.1 as on 2.13.0)
        masked_by=("fs2-grouped-module-reused", "fs2-grouped-module-reused-summed"),
    ),
    KnownBug(
        id="fs2-grouped-module-reused",
        invariants=("FS2-9",),
        reason="A module of a grouped call fully_shard([a, b]) called once more after the group's forward ended "
        "in the same step (pytorch/pytorch#183702's shape: a grouped module reused later in the iteration) runs "
        "outside the group's forward hooks, which count the group's modules in _modules_to_run_forward "
        "(torch.distributed.fsdp._fully_shard._fsdp_state): in fp32, after a forward in which the group had no "
        "trainable parameter (a first forward with it frozen: nothing cleared that set in a backward), the step's "
        "gradients are wrong, the reused module's off and the other module's missing (torch warns '1 of the 2 "
        "modules passed to fully_shard did not run forward before backward'); with a bf16 mp_policy, the "
        "reused module's second call computes on an input left in fp32 and raises 'expected m1 and m2 to have "
        "the same dtype'. 2.13.0 unshards on the group's physical state and completes a partial group at the "
        "root's post-forward (pytorch/pytorch#180428). Its reproducer shows both forms on 2.11.0 and 2.12.1 and "
        "the fp32 one on 2.9.1 and 2.10.0; pytest --fsdpcheck --fsdpcheck-strict fails FS2-9 this way on 2.11.0 "
        "and 2.12.1. It is torch's runtime, not the walk: any implementation driving fully_shard meets it.",
        affects=">=2.9,<2.13",
        seen=("2.9.1", "2.10.0", "2.11.0", "2.12.1"),
        predicate=grouped_module_reused,
        reproducer="fs2-grouped-module-reused.py",
        upstream=("pytorch/pytorch#183702", "pytorch/pytorch#180428"),
    ),
    KnownBug(
        id="fs2-grouped-module-reused-summed",
        invariants=("FS2-9",),
        reason="fs2-grouped-module-reused on a release that also sums gradients over the ranks on gloo "
        "(fs2-gloo-grads-summed): in FS2-9's world with a grouped call fully_shard([a, b]) whose module is "
        "called again after the group's forward, following a forward with the group frozen, the reused module's "
        "gradient is off and the other module's missing, and every other sharded gradient is world_size times "
        "the unsharded one (torch's gloo reduction), as torch's own walk gives in the same run; the bf16 step "
        "raises the uncast input's dtype error. The two bugs together, as 2.7 and 2.8 have them: neither "
        "signature reads the other's lines, so each alone would leave the example unexplained. Its reproducer "
        "(fs2-grouped-module-reused.py) shows the grouped module's form on 2.7.1 and 2.8.0, and "
        "fs2-gloo-grads-summed.py the summing; pytest --fsdpcheck --fsdpcheck-strict fails FS2-9 this way on "
        "both. It is torch's runtime, not the walk: any implementation driving fully_shard meets it.",
        affects=">=2.7,<2.9",
        seen=("2.7.1", "2.8.0"),
        predicate=grouped_module_reused_summed,
        reproducer="fs2-grouped-module-reused.py",
        upstream=("pytorch/pytorch#183702", "pytorch/pytorch#180428", "pytorch/pytorch#162338"),
    ),
    KnownBug(
        id="fs2-unused-params-graphs-differ",
        invariants=("FS2-9",),
        reason="With set_reduce_scatter_unused_params(True), FSDPParamGroup.post_backward reduces a group's "
        "gradients when its backward hook fires: a group whose module every rank calls but whose output feeds "
        "the loss on some ranks only (a multi-modal or auxiliary head on per-rank data) is reduced during the "
        "backward on those ranks and at the root's final callback on the others, so the ranks' reduce-scatters "
        "pair up crosswise: gradients silently wrong where the groups hold as many elements, gloo aborting "
        "('Received data size doesn't match expected size') or the step hanging otherwise. FSDP2 documents the "
        "switch for ranks using different parameters. Found by FS2-9's per-rank batches on a user's plan "
        "(tests.planted.plans:aux_head hangs on 2.13.0); its reproducer shows it on 2.13.0 and 2.15.0 (2.12.1 "
        "has no set_reduce_scatter_unused_params). Only a user's plan with that shape shows it: the default "
        "suite's worlds give every rank the same graph. It is torch's runtime: any implementation driving "
        "fully_shard meets it.",
        affects=">=2.13",
        seen=("2.13.0", "2.15.0"),
        predicate=unused_params_graphs_differ,
        reproducer="fs2-unused-params-graphs-differ.py",
        upstream=("pytorch/pytorch#158719", "pytorch/torchtitan#2747", "pytorch/pytorch#174862"),
        unobservable={r: "only a user's plan whose ranks reach different parameters through modules every rank "
                         "calls shows it (FS2-9 on --fsdpcheck-model); the history command runs the default suite, "
                         "whose worlds give every rank the same graph: its reproducer is run instead"
                      for r in ("2.13.0", "2.14.1", "2.15.0")},
    ),
    KnownBug(
        id="fs2-inplace-view-hook-dropped",
        invariants=("FS2-14",),
        reason="FSDPState._register_pre_backward_hook registers the group's pre-backward hook (its backward "
        "all-gather) on the tensors the module returns; where the module returns a view of its result and the "
        "caller writes into it in place (a residual `out += skip`), autograd rebases the view's history on the "
        "in-place op and the hook never runs. A group resharded after forward then runs its backward on freed "
        "parameter storage: RuntimeError 'setStorage: ... out of bounds for storage of size 0' (a group kept "
        "unsharded computes the right gradients). pytorch/pytorch#181832 was closed by #181850, which only "
        "warns that the module returned a view; the fix is left to a follow-up. Found by FS2-14; the history "
        "command observed it on every release from 2.7.1 to 2.15.0 (2.3 ... 2.6 take no CPU step; read in the "
        "source, their FSDPState registers the hook with Tensor.register_hook on the outputs alike). It is "
        "torch's runtime, not the walk: any implementation driving fully_shard meets it.",
        affects=">=2.3",
        seen=("2.7.1", "2.13.0", "2.15.0"),
        predicate=inplace_view_hook_dropped,
        unobservable=_NO_CPU_STEP_HERE,
        reproducer="fs2-inplace-view-hook-dropped.py",
        upstream=("pytorch/pytorch#181832", "pytorch/pytorch#181850"),
        raises=(("RuntimeError", r"^setStorage: .* out of bounds for storage of size 0$"),),
    ),
    KnownBug(
        id="fs2-tp-reduce-in-compute-dtype",
        invariants=("FS2-15",),
        reason="On a 2-D (dp, tp) mesh, a tensor-parallel parameter replicated over tp (a norm's weight under "
        "SequenceParallel) gets a Partial gradient; FSDPParam._get_grad_inner_tensor redistributes it to "
        "Replicate (the sum over tp) in the dtype the backward computed it in, bf16 under "
        "MixedPrecisionPolicy(param_dtype=bf16), and only then does FSDP2 cast it to reduce_dtype for its own "
        "reduce-scatter over dp: reduce_dtype=fp32, which 'controls the dtype for gradient reduction', does not "
        "reach the tp sum, and each gradient is off by bf16's rounding of it. pytorch/pytorch#190626 (open), "
        "fix pytorch/pytorch#190627 (open); 2.15.0 upcasts before the redistribution. Found by FS2-15; its "
        "reproducer gives BUG on every release from 2.7.1 to 2.14.1 and fixed on 2.15.0, and the history "
        "command reads FS2-15 known on 2.7.1 ... 2.14.1 and pass on 2.15.0. Read in the source, 2.5.1's "
        "_get_grad_inner_tensor redistributes the same way, but 2.3 ... 2.6 take no CPU step (the reproducer "
        "is n/a there) and FS2-15 rides on FS2-9's worlds, n/p before 2.7: the range is what was measured. It "
        "is torch's runtime, not the walk: any implementation driving fully_shard meets it.",
        affects=">=2.7,<2.15",
        seen=("2.7.1", "2.13.0", "2.14.1"),
        predicate=tp_reduced_in_compute_dtype,
        reproducer="fs2-tp-reduce-in-compute-dtype.py",
        upstream=("pytorch/pytorch#190626", "pytorch/pytorch#190627"),
    ),
    KnownBug(
        id="ann-fsdp-int-attr-symbolic",
        invariants=("ANN-8",),
        reason="Dynamo gives the attributes of a module marked FSDP-managed (_is_fsdp_managed_module, as "
        "_annotate_modules_for_dynamo and fully_shard mark them) an FSDPNNModuleSource, whose guard source is "
        "neither a specialized nor an unspecialized nn module: under skip_fsdp_guards (the default) the rule that "
        "specializes a module's int members (allow_unspec_int_on_nn_module off: 'Dynamo will always specialize "
        "on int members of NN module') does not apply, and under torch.compile(dynamic=True) an int attribute "
        "(a head count, the ints of a tuple shape) becomes a SymInt input of the graph where the same module "
        "unmanaged keeps a constant: specialisation silently lost, more symbolic kernel arguments "
        "(pytorch/pytorch#194795, open). On 2.6 and 2.7 Dynamo takes a plain module's int attributes "
        "symbolically too, and only the ints of a tuple attribute differ. Found by ANN-8. It is Dynamo's, not the annotation's: any "
        "implementation that marks modules as torch does meets it.",
        affects=">=2.6",
        seen=("2.6.0", "2.15.0"),
        predicate=int_attributes_lifted,
        reproducer="ann-fsdp-int-attr-symbolic.py",
        upstream=("pytorch/pytorch#194795",),
        needs_compile=True,
    ),
    KnownBug(
        id="spl-float-partition-output",
        invariants=("SPL-16",),
        reason="DDPOptimizer splits a graph whose bucket computes a symbolic float (a drop probability Dynamo "
        "took as an input when it compiled a block's frame again for another block's value) that a later bucket "
        "uses: the float becomes an output of the split's submodule, and the bucket's compile (FakifiedOutWrapper, "
        "AOTAutograd) reads .meta of every output: AttributeError: 'float' object has no attribute 'meta'. The "
        "same program compiles with optimize_ddp=False. pytorch/pytorch#196227 (open; fix proposed in "
        "pytorch/pytorch#197420). Found by SPL-16's float-scaled residual blocks. It is torch's DDPOptimizer, "
        "not the plan: any implementation's SPL-16 world runs torch's compile of DDP.",
        affects=">=2.7",
        seen=("2.7.1", "2.15.0"),
        predicate=float_partition_output,
        reproducer="spl-float-partition-output.py",
        upstream=("pytorch/pytorch#196227", "pytorch/pytorch#197420"),
        needs_compile=True,
    ),
    KnownBug(
        id="exo-method-target-taken-as-param",
        invariants=("EXO-3", "EXO-4"),
        reason="_ExecOrderTracer._patched_create_proxy takes an argument for a parameter when "
        "`arg.node.target in fqn_to_param`, without checking that the node is a get_attr: with a root "
        "parameter named like a Tensor method (`t`, `view`, `sum`), the result of `w.t()` (a call_method "
        "node with target 't') is recorded as a use of that parameter, used or not.",
        affects=">=2.0",
        seen=("2.0.1", "2.15.0"),
        reference={"exec_order": {"param_nodes": "any_target"}},
        reproducer="exo-method-target-taken-as-param.py",
    ),
)


#: the known bugs of ``fully_shard``'s runtime (not of its walk): every
#: implementation whose walk FS2-9 drives through that runtime meets them
#: as torch's own walk does (the signatures require torch's own walk to
#: fail the same way in the same run), so the reference declares them too
FULLY_SHARD_RUNTIME_BUGS: tuple[KnownBug, ...] = tuple(
    bug for bug in TORCH_BUGS
    if bug.id in {"fs2-gloo-grads-summed", "fs2-frozen-mp-latched", "fs2-frozen-dtypes-asserted", "fs2-int-param-rejected",
                  "fs2-grouped-module-reused", "fs2-grouped-module-reused-summed", "fs2-unused-params-graphs-differ",
                  "fs2-inplace-view-hook-dropped", "fs2-tp-reduce-in-compute-dtype"}
)


#: the known bugs of Dynamo in how it compiles what an implementation is
#: judged beside, never the implementation's own output: a module the
#: annotation marked (ANN-8), and DDP in SPL-16's world, whose compiled steps
#: every implementation's cell reports. Every implementation meets them, so
#: the reference declares them too
DYNAMO_RUNTIME_BUGS: tuple[KnownBug, ...] = tuple(
    bug for bug in TORCH_BUGS if bug.id in {"ann-fsdp-int-attr-symbolic", "spl-float-partition-output"})
