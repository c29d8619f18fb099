"""What each torch release provides: per area or feature of the ``torch``
implementation, the first release that has it (and the last, for one a
later release removed).

Decided from the version alone, before anything runs, so an ``n/p`` is never
the outcome of a probe that failed: a torch release on which the table says
an area or feature exists, but the adapter could not find it (a renamed
function, a moved module), is a finding, and ``--fsdpcheck-strict`` fails
on it. Pure: no torch import.
"""

from __future__ import annotations

import re

#: the latest patch of every minor release the suite promises to be green on
#: (README, docs/history.md): what the history command's ``--all`` runs and
#: ``--affected-by`` picks from, and what ``known/observed.json`` is kept for
RELEASES = ("2.0.1", "2.1.2", "2.2.2", "2.3.1", "2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0",
            "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0")

#: area, or "area.feature" -> the first torch release (major, minor) providing it
PROVIDED_FROM: dict[str, tuple[int, int]] = {
    "traversal": (2, 0),
    "annotation": (2, 0),
    # ANN-7's Dynamo effect: Dynamo lifting the parameters of a module marked
    # FSDP-managed as graph inputs with an FSDP guard source (2.1.2 keeps them
    # as attributes; the history runs pass it from 2.2.2). On a release from
    # here on, the probe finding no such effect is torch's Dynamo failing
    # ANN-7, never a reason to judge nothing
    "annotation.dynamo_effect": (2, 2),
    "exec_order": (2, 0),
    "splitting": (2, 0),
    # DDPOptimizer counts parameters lifted to placeholders (add_param_args,
    # first in 2.5: 2.4.1 sizes every dynamo-form bucket 0)
    "splitting.dynamo_form": (2, 5),
    # compile_fn's call_module/get_attr branches: every release measured
    "splitting.module_form": (2, 0),
    "splitting.higher_order_ops": (2, 1),
    # DDPOptimizer splits a graph holding a higher-order op (activation
    # checkpointing, FlexAttention, wrap): read in the source of each minor's
    # latest patch, compile_fn raises NotImplementedError "Found a higher
    # order op in the graph" in 2.1.2 ... 2.5.1 and splits from 2.6.0 on
    # (measured: 2.4.1 rejects a checkpointed model compiled through it,
    # 2.13.0 and 2.15.0 split it)
    "splitting.splits_higher_order_ops": (2, 6),
    # FlexAttention (torch.nn.attention.flex_attention): first in 2.5
    "splitting.flex_attention": (2, 5),
    # torch.fx's split_module sorts the free symbols of each value a bucket
    # hands on (record_cross_partition_use): 2.1.2 and 2.2.2 sort the sympy
    # symbols themselves, which do not compare ("cannot determine truth value
    # of Relational: s0 < s1") once two cross a bucket boundary; 2.3.1 sorts
    # them by name. Measured: 2.2.2 fails sequence-mean inside a dynamic
    # compile in torch's and the reference's column alike, 2.3.1 passes
    "splitting.symbolic_cross_bucket": (2, 3),
    # AOTAutograd takes a split submodule whose placeholders holding values
    # of earlier buckets have no Dynamo source (_dynamo_source None, what
    # SPL-10 asks a split to carry): 2.13.0's frontend_utils says so
    # ("ddp optimizer may have intermediate values becoming submodule
    # placeholders which does not have a source"), the change that made
    # DDPOptimizer carry the sources (pytorch#155746, 2.8). Measured on
    # 2.4.1: aot_module_simplified asserts the sources are distinct and one
    # per input, so a bucket taking two such values raises AssertionError
    "splitting.aot_sourceless_inputs": (2, 8),
    # compile_fn's lazy path (optimize_ddp_lazy_compile=True: SubmoduleReplacer,
    # LazilyCompiledModule compiling each submodule at its first call): read in
    # the source of each minor's latest patch, 2.0.1-2.15.0: only 2.3.1 and
    # 2.4.1 have it (the same code in both; test_lazy_split_cases ran it on
    # both); 2.0-2.2 have neither the flag nor the path, 2.5-2.15 keep the
    # flag ("No longer used") but not the path (PROVIDED_UNTIL)
    "splitting.lazy_compile": (2, 3),
    # the log states how many buckets there are outside its tables
    # ("used bucket cap N and created K buckets"): read in 2.0.1's
    # pretty_print_buckets, torch 2.0 logs "used bucket cap N and produced the
    # following buckets:" and gives the buckets only in the table it prints
    # with tabulate ("Please `pip install tabulate`" without it), so there
    # its log without tabulate cannot state the count; 2.1.2 on log it
    "splitting.log_bucket_count": (2, 1),
    # compile_fn's **compiler_configs (what Dynamo passes it, such as the
    # config_patches of a per-graph inductor override), handed on to the
    # backend call of an unsplit graph and of every bucket (SubmodCompiler):
    # read in the source of 2.7.1, 2.9.1, 2.11.0, 2.12.0 (compile_fn takes
    # gm and example_inputs only) and 2.13.0 (it has them)
    "splitting.compiler_configs": (2, 13),
    # the caller's saved-tensors hooks deferred while DDPOptimizer propagates
    # fake values through its buckets and compiles them (compile_fn's
    # _disable_saved_tensors_hooks_during_tracing; NOTE [Deferring tensor
    # pack/unpack hooks until runtime]): read in the source, absent from
    # 2.4.1, 2.5.1 and 2.6.0, present in 2.7.1, 2.9.1, 2.11.0, 2.12.0, 2.13.0;
    # measured on 2.4.1: the pack hook fires on the fake values
    "splitting.saved_tensors_hooks_deferred": (2, 7),
    # fully_shard's _fsdp_init (torch.distributed._composable.fsdp until 2.5)
    "fsdp2": (2, 3),
    # _get_managed_modules takes a tuple of root modules
    "fsdp2.several_roots": (2, 5),
    # the walk, the states and fully_shard take ignored_params
    "fsdp2.ignored_params": (2, 7),
    # fully_shard's runtime (lazy init, all-gather, reduce-scatter) on CPU
    # ranks: measured, 2.3/2.4 create CUDA streams at the first forward, 2.5
    # raises "FSDP requires CUDA for streams", 2.6's CPU stream lacks
    # record_event; 2.7 runs a step under gloo
    "fsdp2.cpu_runtime": (2, 7),
    # FS2-10's simulated worlds: fully_shard built at 8 to 1024 ranks and on
    # a 2-D mesh in one process, one rank's view at a time, on torch's fake
    # process group (torch.testing._internal.distributed.fake_pg's FakeStore
    # and the "fake" backend; collectives move no data). Measured on 2.13.0
    # only (every sampled rank of 8, 64, 256, 1024 and 2x4, 4x256 built and
    # read back); earlier releases are not measured, so they are n/p by
    # release until a history run shows them
    "fsdp2.simulated_world": (2, 13),
}


#: feature -> the last torch release (major, minor) providing it, for a
#: feature a later release removed
PROVIDED_UNTIL: dict[str, tuple[int, int]] = {
    "splitting.lazy_compile": (2, 4),
}


#: invariants whose every check needs a feature newer than their area
#: (measured in the history runs: SPL-14 n/p on 2.0, FS2-3, FS2-9 and FS2-11 until 2.6)
INVARIANT_FEATURE: dict[str, str] = {
    "ANN-7": "annotation.dynamo_effect",
    "SPL-14": "splitting.higher_order_ops",
    "SPL-19": "splitting.compiler_configs",
    "FS2-3": "fsdp2.ignored_params",
    "FS2-9": "fsdp2.ignored_params",
    "FS2-10": "fsdp2.simulated_world",
    # the ranks' agreement compares the records FS2-9's worlds gathered: none
    # where FS2-9 has none (measured: n/p on 2.4.1, strict then failed on it)
    "FS2-11": "fsdp2.ignored_params",
    "FS2-12": "fsdp2.cpu_runtime",
    "FS2-13": "fsdp2.cpu_runtime",
    "FS2-14": "fsdp2.cpu_runtime",
    # FS2-15's step rides on FS2-9's worlds: none where FS2-9 has none
    "FS2-15": "fsdp2.ignored_params",
}


def invariant_provided(invariant: str, area: str, torch_version) -> bool:
    """Whether torch ``torch_version`` provides what every check of
    ``invariant`` (of ``area``) needs."""
    return expected_provided(INVARIANT_FEATURE.get(invariant, area), torch_version)


def release(version) -> tuple[int, int]:
    """``(major, minor)`` of ``"2.13.0+cpu"``, ``"2.5.0a0+git..."`` or a tuple."""
    if isinstance(version, tuple):
        return tuple(version[:2])
    match = re.match(r"(\d+)\.(\d+)", str(version))
    if match is None:
        raise ValueError(f"not a torch version: {version!r}")
    return int(match.group(1)), int(match.group(2))


def expected_provided(feature: str, torch_version) -> bool:
    """Whether torch ``torch_version`` (a version string or ``(major, minor)``)
    provides ``feature`` (an area of ``catalog.AREAS`` or ``"area.feature"``)."""
    if feature not in PROVIDED_FROM:
        raise KeyError(f"no release is recorded for {feature!r}; known: {', '.join(sorted(PROVIDED_FROM))}")
    have = release(torch_version)
    return PROVIDED_FROM[feature] <= have <= PROVIDED_UNTIL.get(feature, have)


def first_release(feature: str) -> str:
    """The first torch release providing ``feature``, as ``"2.7"``."""
    return ".".join(map(str, PROVIDED_FROM[feature]))


def releases(feature: str) -> str:
    """The torch releases providing ``feature``: ``"2.4"``, ``"2.3-2.4"`` or ``"2.7 on"``."""
    first = first_release(feature)
    if feature not in PROVIDED_UNTIL:
        return f"{first} on"
    last = ".".join(map(str, PROVIDED_UNTIL[feature]))
    return first if first == last else f"{first}-{last}"


def installed_torch() -> tuple[int, int]:
    import torch

    return release(torch.__version__)


