"""Planted-bug splitting implementations, one per SPL invariant (1..15).

Each is the reference with one behaviour broken; ``tests/test_planted_splitting.py``
proves the suite fails the matching invariant. The planner here is a
knob-driven restatement of the reference walk so one rule can be bent at a
time. The bugs of the compile around the split (what each bucket's compile
is handed, lazily, in which context, with which configs) are
``tests/planted/splitting_compiled.py``'s, on this module's base class.
"""

from __future__ import annotations

import torch

from pytest_fsdpcheck.contract import BucketInfo, SplitResult
from pytest_fsdpcheck.reference import splitting as ref


def plan(gm, cap, first_cap, *, use_first_cap=True, need_output=True, count_frozen=False,
         per_use=False, fuse=True, close_late=False, first_cap_everywhere=False, close_above=False,
         size_with_node=False, split=True, fuse_params=True, argument_producers=False, called_modules=True):
    buckets = [ref._Bucket()]
    index: dict = {}
    counted: set = set()
    delayed = False
    for node in reversed(gm.graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        current = buckets[-1]
        limit = first_cap if ((len(buckets) == 1 and use_first_cap) or first_cap_everywhere) else cap
        # size_with_node: the node's own bytes counted before deciding whether it starts a new bucket
        size = current.size + (_new_bytes(gm, node, counted, count_frozen, per_use) if size_with_node else 0)
        if split and (size > limit if close_above else size >= limit):
            if current.has_external_output or not need_output:
                if close_late and not delayed:
                    delayed = True
                else:
                    delayed = False
                    current = ref._Bucket()
                    buckets.append(current)
            else:
                if current.extra_ops == 0:
                    current.size_before_extension = current.size
                current.extra_ops += 1
        reads = ref._node_params(gm, node)
        if not called_modules and node.op == "call_method" and isinstance(_receiver(gm, node), torch.nn.Module):
            reads = []  # a module called through its forward (get_attr + call_method) weighs nothing
        if argument_producers and node.op == "call_method":
            # the parameters read by the nodes whose outputs the method call takes as arguments
            reads = [*reads, *(pair for arg in node.args[1:] if isinstance(arg, torch.fx.Node)
                               for pair in ref._node_params(gm, arg))]
        for name, param in reads:
            trainable = isinstance(param, torch.nn.Parameter) and (param.requires_grad or count_frozen)
            if trainable and not getattr(param, "_ddp_ignored", False) and (per_use or id(param) not in counted):
                counted.add(id(param))
                current.size += param.untyped_storage().nbytes()
                current.params.append(name)
                current.param_ids.append(id(param))
        here = len(buckets) - 1
        index[node] = here
        if not current.has_external_output:
            current.has_external_output = any(index.get(u) != here for u in node.users)
        current.nodes.append(node)
    if fuse and len(buckets) > 1 and buckets[-1].size == 0:
        preamble = buckets.pop()
        buckets[-1].nodes.extend(preamble.nodes)
        if fuse_params:  # a zero-element parameter the preamble read
            buckets[-1].params.extend(preamble.params)
            buckets[-1].param_ids.extend(preamble.param_ids)
    buckets.reverse()
    for b in buckets:
        b.nodes.reverse()
    return buckets


def _receiver(gm, node):
    receiver = node.args[0] if node.args else None
    return ref._fetch_attr(gm, receiver.target) if getattr(receiver, "op", None) == "get_attr" else None


def _new_bytes(gm, node, counted, count_frozen, per_use) -> int:
    return sum(param.untyped_storage().nbytes() for _, param in ref._node_params(gm, node)
               if isinstance(param, torch.nn.Parameter) and (param.requires_grad or count_frozen)
               and not getattr(param, "_ddp_ignored", False) and (per_use or id(param) not in counted))


def infos(buckets):
    return [
        BucketInfo([n.name for n in b.nodes], b.size, list(b.params), list(b.param_ids), b.extra_ops,
                   b.size - b.size_before_extension if b.extra_ops else 0)
        for b in buckets
    ]


class PlantedSplitting:
    graph_form = "dynamo"
    knobs: dict = {}

    def split(self, gm, example_inputs, *, bucket_bytes_cap, first_bucket_cap, backend):
        first = ref.DEFAULT_FIRST_BUCKET_BYTES if first_bucket_cap is None else first_bucket_cap
        self.check_caps(first, bucket_bytes_cap)
        buckets = plan(gm, bucket_bytes_cap, first, **self.knobs)
        result = SplitResult(infos(buckets), None, ref.table_lines(buckets, bucket_bytes_cap))
        result.compiled = self.compile(gm, buckets, example_inputs, backend)
        return self.finish(result, gm, buckets)

    def check_caps(self, first, cap):
        if first > cap:
            raise ValueError(f"first_bucket_cap {first} exceeds bucket_bytes_cap {cap}")

    def compile(self, gm, buckets, example_inputs, backend):
        if len(buckets) == 1:
            return backend(gm, list(example_inputs))
        return ref._split_and_compile(gm, buckets, example_inputs, backend)

    def finish(self, result, gm, buckets):
        return result


def _impl(splitting_cls):
    class Impl:
        traversal = annotation = exec_order = None
        splitting = splitting_cls()

    Impl.__name__ = splitting_cls.__name__
    return Impl


class _AcceptsBigFirstCap(PlantedSplitting):  # SPL-1
    def check_caps(self, first, cap):
        pass


class _DropsANode(PlantedSplitting):  # SPL-2
    def finish(self, result, gm, buckets):
        result.buckets[0].nodes = result.buckets[0].nodes[1:]
        return result


class _CountsFrozen(PlantedSplitting):  # SPL-3
    knobs = {"count_frozen": True}


class _CountsPerUse(PlantedSplitting):  # SPL-4
    knobs = {"per_use": True}


class _ClosesLate(PlantedSplitting):  # SPL-5
    knobs = {"close_late": True}


class _NoExtension(PlantedSplitting):  # SPL-6
    knobs = {"need_output": False}


class _HidesExtension(PlantedSplitting):  # SPL-7
    def finish(self, result, gm, buckets):
        for b in result.buckets:
            b.extra_ops = b.extra_bytes = 0
        return result


class _ExtensionFromGraphEnd(PlantedSplitting):  # SPL-7: absorbed bytes measured against the graph end's bucket
    def finish(self, result, gm, buckets):
        end = result.buckets[-1]
        for b in result.buckets:
            if b.extra_ops and b is not end:
                b.extra_bytes = b.size - end.size
        return result


class _ExtensionStartOnce(PlantedSplitting):  # SPL-7: where an extension began recorded for the first extended bucket only
    def finish(self, result, gm, buckets):
        # walking back from the graph's end, the first bucket extended keeps its measure;
        # every one extended after it reports its whole size as absorbed
        extended = [b for b in result.buckets if b.extra_ops]
        for b in extended[:-1]:
            b.extra_bytes = b.size
        return result


class _CountsArgumentProducers(PlantedSplitting):  # SPL-3: a method call counts what its arguments' producers read
    knobs = {"argument_producers": True}


class _NoFusion(PlantedSplitting):  # SPL-8
    knobs = {"fuse": False}


class _FusionDropsParams(PlantedSplitting):  # SPL-3: a fused zero-byte preamble's parameters listed nowhere
    knobs = {"fuse_params": False}


class _AlwaysSplits(PlantedSplitting):  # SPL-9
    def compile(self, gm, buckets, example_inputs, backend):
        return ref._split_and_compile(gm, buckets, example_inputs, backend)


class _CompilesWhole(PlantedSplitting):  # SPL-10
    def compile(self, gm, buckets, example_inputs, backend):
        return backend(gm, list(example_inputs))


class _WrongOutputs(PlantedSplitting):  # SPL-11
    def compile(self, gm, buckets, example_inputs, backend):
        compiled = super().compile(gm, buckets, example_inputs, backend)

        def off_by_a_bit(*args):
            out = compiled(*args)
            return (out[0] * 1.01, *out[1:])

        return off_by_a_bit


class _EditsOriginal(PlantedSplitting):  # SPL-12
    def compile(self, gm, buckets, example_inputs, backend):
        # after compiling, leave the caller's graph doubling its first output
        compiled = super().compile(gm, buckets, example_inputs, backend)
        output = next(n for n in gm.graph.nodes if n.op == "output")
        first = output.args[0][0]
        with gm.graph.inserting_before(output):
            doubled = gm.graph.call_function(torch.mul, (first, 2))
        output.args = ((doubled, *output.args[0][1:]),)
        gm.recompile()
        return compiled


class _WrongTable(PlantedSplitting):  # SPL-13
    def finish(self, result, gm, buckets):
        result.table = [line.replace(f"created {len(buckets)} buckets", f"created {len(buckets) + 1} buckets") for line in result.table]
        return result


class _HopCrash(PlantedSplitting):  # SPL-14
    def split(self, gm, example_inputs, **kwargs):
        if any(n.op == "get_attr" and isinstance(getattr(gm, n.target), torch.fx.GraphModule) for n in gm.graph.nodes):
            raise RuntimeError("cannot split")
        return super().split(gm, example_inputs, **kwargs)


class _RejectsHops(PlantedSplitting):  # SPL-14: a clear NotImplementedError for any higher-order op, as torch 2.1-2.5, undeclared
    def split(self, gm, example_inputs, **kwargs):
        if any(isinstance(n.target, torch._ops.HigherOrderOperator) for n in gm.graph.nodes):
            raise NotImplementedError("this splitter cannot split a graph with a higher-order op")
        return super().split(gm, example_inputs, **kwargs)


class _IgnoresFirstCap(PlantedSplitting):  # SPL-15
    knobs = {"use_first_cap": False}


# The splitting bugs a fixed case (conformance test_split_cases) sees in a
# second, where a property needs its search first (issue 29).


class _FirstCapEverywhere(PlantedSplitting):  # SPL-5: every bucket closes at the first-bucket cap
    knobs = {"first_cap_everywhere": True}


class _ClosesAboveCap(PlantedSplitting):  # SPL-5: `size > cap` where a bucket closes at `size >= cap`
    knobs = {"close_above": True}


class _SizeWithNextNode(PlantedSplitting):  # SPL-5: the size checked after adding the next node's bytes
    knobs = {"size_with_node": True}


class _NeverSplits(PlantedSplitting):  # SPL-5: one bucket whatever the caps
    knobs = {"split": False}


class _ReversedBuckets(PlantedSplitting):  # SPL-2: the bucket list last-first (DDP's numbering)
    def finish(self, result, gm, buckets):
        result.buckets.reverse()
        return result


# The log's extended-bucket table broken, the buckets right (SPL-13 alone
# sees it): the mutants of torch's pretty_print_buckets that survived while
# only an extended-bucket table present in the log was compared.

_EXTENDED_HEADING = "DDPOptimizer extended these buckets"


def _extension_rows(table):
    """``(lines before the extended-bucket table, its heading lines, its rows)``."""
    at = next((k for k, line in enumerate(table) if line.startswith(_EXTENDED_HEADING)), len(table))
    return table[:at], table[at:at + 2], table[at + 2:]


class _OmitsExtendedTable(PlantedSplitting):  # SPL-13: no extended-bucket table at all
    def finish(self, result, gm, buckets):
        result.table = _extension_rows(result.table)[0]
        return result


class _OmitsOneOpExtensions(PlantedSplitting):  # SPL-13: a bucket extended by one op left out (`> 1` for `> 0`)
    def finish(self, result, gm, buckets):
        before, heading, rows = _extension_rows(result.table)
        kept = [row for row in rows if row.split(" | ")[1] != "1"]
        result.table = before + (heading + kept if kept else [])
        return result


class _MisreportsAbsorbedBytes(PlantedSplitting):  # SPL-13: the extended bucket's whole size as the bytes it absorbed
    def finish(self, result, gm, buckets):
        before, heading, rows = _extension_rows(result.table)
        sizes = [b.size for b in reversed(result.buckets)]
        cells = [row.split(" | ") for row in rows]
        result.table = before + heading + [f"{i} | {ops} | {sizes[int(i)]}" for i, ops, _ in cells]
        return result


def _tabulate_missing() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return True
    return False


class _TablesNeedTabulate(PlantedSplitting):
    """Logs as torch does where ``tabulate`` cannot be imported: the header
    only, no tables (the base of the loggers below)."""

    def finish(self, result, gm, buckets):
        if _tabulate_missing():
            result.table = [line for line in result.table[:2] if not line.startswith("DDPOptimizer produced")]
        return result


class _ExtensionOnlyInTable(_TablesNeedTabulate):  # SPL-13: only the extended-bucket table says a bucket grew
    def finish(self, result, gm, buckets):
        result.table = [line for line in result.table if not line.startswith("Some buckets were extended")]
        return super().finish(result, gm, buckets)


class _CrashesWithoutTabulate(_TablesNeedTabulate):  # SPL-13: the log's tables are not optional
    def finish(self, result, gm, buckets):
        if _tabulate_missing():
            raise ImportError("No module named 'tabulate'")
        return super().finish(result, gm, buckets)


# issue 37 item 5: torch 2.0 states the cap but gives the bucket count only in
# the table it prints with tabulate, and declares so (logs_bucket_count=False,
# provided: splitting.log_bucket_count); that excuses the count alone


def _header_as_torch_2_0(lines, cap):
    return [f"DDPOptimizer used bucket cap {cap} and produced the following buckets:"
            if line.startswith("DDPOptimizer used bucket cap") else line for line in lines]


class _LogsAsTorch20(_TablesNeedTabulate):
    """Logs as torch 2.0 does where tabulate cannot be imported (the cap,
    no count, no tables), and says so: SPL-13 holds (the control of the
    killers below)."""

    logs_bucket_count = False

    def split(self, gm, example_inputs, *, bucket_bytes_cap, first_bucket_cap, backend):
        result = super().split(gm, example_inputs, bucket_bytes_cap=bucket_bytes_cap,
                               first_bucket_cap=first_bucket_cap, backend=backend)
        if _tabulate_missing():
            result.table = _header_as_torch_2_0(result.table, bucket_bytes_cap)
        return result


class _CountlessWithoutCap(_LogsAsTorch20):  # SPL-13: declared count-less, and the cap is not logged either
    def finish(self, result, gm, buckets):
        result = super().finish(result, gm, buckets)
        result.table = [line for line in result.table if "bucket cap" not in line]
        return result


class _CountlessWrongCap(_LogsAsTorch20):  # SPL-13: declared count-less, and the logged cap is wrong
    def split(self, gm, example_inputs, *, bucket_bytes_cap, first_bucket_cap, backend):
        result = super().split(gm, example_inputs, bucket_bytes_cap=bucket_bytes_cap,
                               first_bucket_cap=first_bucket_cap, backend=backend)
        result.table = [line.replace(f"cap {bucket_bytes_cap} ", f"cap {bucket_bytes_cap + 1} ") for line in result.table]
        return result


class _CountlessUndeclared(_LogsAsTorch20):  # SPL-13: logs as torch 2.0 without saying its count is in the table only
    logs_bucket_count = True


class _TorchCountlessWithoutCap:
    """SPL-13 through torch's column: the installed torch's DDPOptimizer,
    declared to give the count only in its tables (as 2.0 does), whose log
    without tabulate also loses the line stating the cap."""

    logs_bucket_count = False

    def __init__(self):
        from pytest_fsdpcheck.impls.torch_splitting import TorchSplitting

        self._inner = TorchSplitting()

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def split(self, gm, example_inputs, **kwargs):
        result = self._inner.split(gm, example_inputs, **kwargs)
        if _tabulate_missing():
            result.table = [line for line in result.table if "bucket cap" not in line]
        return result


class _NotesExtensionAlways(PlantedSplitting):  # SPL-13: the note that buckets were extended, also where none was
    def finish(self, result, gm, buckets):
        if result.table and not any(line.startswith("Some buckets were extended") for line in result.table):
            result.table = [result.table[0], "Some buckets were extended beyond their requested parameter capacities.",
                            *result.table[1:]]
        return result


class _CalledModuleWeighsNothing(PlantedSplitting):  # SPL-3: `self.lin.forward(h)` (get_attr + call_method) counts no bytes
    graph_form = "module"
    knobs = {"called_modules": False}


AcceptsBigFirstCap = _impl(_AcceptsBigFirstCap)
DropsANode = _impl(_DropsANode)
CountsFrozen = _impl(_CountsFrozen)
CountsPerUse = _impl(_CountsPerUse)
ClosesLate = _impl(_ClosesLate)
NoExtension = _impl(_NoExtension)
HidesExtension = _impl(_HidesExtension)
ExtensionFromGraphEnd = _impl(_ExtensionFromGraphEnd)
ExtensionStartOnce = _impl(_ExtensionStartOnce)
CountsArgumentProducers = _impl(_CountsArgumentProducers)
NoFusion = _impl(_NoFusion)
FusionDropsParams = _impl(_FusionDropsParams)
AlwaysSplits = _impl(_AlwaysSplits)
CompilesWhole = _impl(_CompilesWhole)
WrongOutputs = _impl(_WrongOutputs)
EditsOriginal = _impl(_EditsOriginal)
WrongTable = _impl(_WrongTable)
HopCrash = _impl(_HopCrash)
RejectsHops = _impl(_RejectsHops)
IgnoresFirstCap = _impl(_IgnoresFirstCap)
FirstCapEverywhere = _impl(_FirstCapEverywhere)
ClosesAboveCap = _impl(_ClosesAboveCap)
SizeWithNextNode = _impl(_SizeWithNextNode)
NeverSplits = _impl(_NeverSplits)
ReversedBuckets = _impl(_ReversedBuckets)
OmitsExtendedTable = _impl(_OmitsExtendedTable)
OmitsOneOpExtensions = _impl(_OmitsOneOpExtensions)
MisreportsAbsorbedBytes = _impl(_MisreportsAbsorbedBytes)
ExtensionOnlyInTable = _impl(_ExtensionOnlyInTable)
CrashesWithoutTabulate = _impl(_CrashesWithoutTabulate)
NotesExtensionAlways = _impl(_NotesExtensionAlways)
LogsAsTorch20 = _impl(_LogsAsTorch20)
CountlessWithoutCap = _impl(_CountlessWithoutCap)
CountlessWrongCap = _impl(_CountlessWrongCap)
CountlessUndeclared = _impl(_CountlessUndeclared)
TorchCountlessWithoutCap = _impl(_TorchCountlessWithoutCap)
CalledModuleWeighsNothing = _impl(_CalledModuleWeighsNothing)

#: planted implementation name -> the invariant it must fail
TARGETS = {
    "AcceptsBigFirstCap": "SPL-1",
    "DropsANode": "SPL-2",
    "CountsFrozen": "SPL-3",
    "CountsPerUse": "SPL-4",
    "ClosesLate": "SPL-5",
    "NoExtension": "SPL-6",
    "HidesExtension": "SPL-7",
    "NoFusion": "SPL-8",
    "AlwaysSplits": "SPL-9",
    "CompilesWhole": "SPL-10",
    "WrongOutputs": "SPL-11",
    "EditsOriginal": "SPL-12",
    "WrongTable": "SPL-13",
    "HopCrash": "SPL-14",
    "IgnoresFirstCap": "SPL-15",
    "FirstCapEverywhere": "SPL-5",
    "ClosesAboveCap": "SPL-5",
    "SizeWithNextNode": "SPL-5",
    "NeverSplits": "SPL-5",
    "ReversedBuckets": "SPL-2",
}

#: planted implementation name -> the invariant a fixed case of
#: test_split_cases fails it on (tests/test_planted_split_cases.py runs them
#: on that test alone): the cap rules' bugs, and the older killers whose
#: first catch was a property (IgnoresFirstCap: SPL-15's; CompilesWhole,
#: AlwaysSplits, WrongOutputs, EditsOriginal: the compiled split's). It
#: names splitters of splitting_compiled.py too (SPL-10's, SPL-17's): a
#: name's spec is the module that defines it
FIXED_CASE_TARGETS = {
    "FirstCapEverywhere": "SPL-5",
    "IgnoresFirstCap": "SPL-5",
    "ClosesAboveCap": "SPL-5",
    "SizeWithNextNode": "SPL-5",
    "NeverSplits": "SPL-5",
    "CompilesWhole": "SPL-10",
    "ReversedBuckets": "SPL-2",
    "ClosesLate": "SPL-5",
    "NoExtension": "SPL-6",
    "HidesExtension": "SPL-7",
    "NoFusion": "SPL-8",
    "AlwaysSplits": "SPL-9",
    "WrongOutputs": "SPL-11",
    "EditsOriginal": "SPL-12",
    "WrongTable": "SPL-13",
    "DropsANode": "SPL-2",
    "OmitsExtendedTable": "SPL-13",
    "OmitsOneOpExtensions": "SPL-13",
    "MisreportsAbsorbedBytes": "SPL-13",
    "NotesExtensionAlways": "SPL-13",
    "SingleOutputs": "SPL-10",
    "DoubleWrapsTuples": "SPL-10",
    "DropsGraphMetadata": "SPL-10",
    "DropsInputSources": "SPL-10",
    "ExtensionFromGraphEnd": "SPL-7",
    "FusionDropsParams": "SPL-3",
    "ExtensionStartOnce": "SPL-7",
    "CountsArgumentProducers": "SPL-3",
    "ContiguousExampleInputs": "SPL-17",
    "GradlessExampleInputs": "SPL-17",
    "MetaExampleInputs": "SPL-17",
    "CalledModuleWeighsNothing": "SPL-3",
}

#: planted implementation name -> the invariant test_bucket_log_without_tabulate fails it on
NO_TABULATE_TARGETS = {"ExtensionOnlyInTable": "SPL-13", "CrashesWithoutTabulate": "SPL-13"}

#: the same test, next to LogsAsTorch20 (torch 2.0's log, declared count-less,
#: which passes): declaring the count table-only excuses the count, nothing else
COUNTLESS_TARGETS = {"CountlessWithoutCap": "SPL-13", "CountlessWrongCap": "SPL-13",
                     "CountlessUndeclared": "SPL-13", "TorchCountlessWithoutCap": "SPL-13"}

#: planted implementation name -> the invariant test_higher_order_cases fails it on
HOP_CASE_TARGETS = {"HopCrash": "SPL-14", "RejectsHops": "SPL-14"}
