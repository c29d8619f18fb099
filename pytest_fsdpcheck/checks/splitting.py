"""Checkers for the splitting area's plan (SPL-1..8, 13, 15), and the graph
facts every splitting checker reads.

They judge a plan (a list of ``BucketInfo``) and what happened around it from
facts read off the input graph here, never through an implementation's own
bucketing code: parameter tensors are found through the graph module's own
modules/attributes (module form) or by position in ``example_inputs``
(Dynamo form), and every size is recomputed. Each parameter is attributed to
the latest node that reads it, so it is counted once over the whole plan.

A plan names its parameters by id. In a graph Dynamo really captured, a
placeholder's ``example_value`` is a FakeTensor standing for the real input
(torch's DDPOptimizer lists the fakes' ids): :func:`real_ids` maps each fake
back to the real tensor, so the checkers always compare real parameters and
a bucket listing the wrong ones is told from one listing fakes of the right
ones.

What the split does with the plan once it is made (the backend calls, what
each is handed and the state it runs in, what the split module computes:
SPL-9..12, 14, 17..19) is judged by :mod:`.splitting_compiled`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import Violation, short

OUTPUT = "<output>"


@dataclass
class GraphFacts:
    nodes: list[str]  # op nodes (not placeholder/output) in graph order
    position: dict[str, int]
    users: dict[str, list[str]]  # OUTPUT for the graph output
    inputs_of: dict[str, list[str]]  # node -> nodes (placeholders included) it reads
    reads: dict[str, list[tuple[int, int, str]]]  # node -> (param id, bytes, name) per read
    attrs: set = field(default_factory=set)  # get_attr nodes
    attributed: dict[str, int] = field(default_factory=dict)  # node -> bytes counted there
    attributed_ids: dict[str, set] = field(default_factory=dict)
    total: int = 0  # bytes of all distinct counted parameters
    #: id of a placeholder's example value (a fake) -> id of the real input behind it
    real: dict[int, int] = field(default_factory=dict)
    #: every tensor a node reads that counts zero -> (name, why: "DDP-ignored", "frozen", "not a parameter")
    uncounted: dict[int, tuple[str, str]] = field(default_factory=dict)

    def real_id(self, pid: int) -> int:
        """The real tensor's id for an id a plan lists (a fake's or a real one)."""
        return self.real.get(pid, pid)


def _uncounted_reason(tensor) -> str | None:
    """Why ``tensor`` counts zero towards a bucket, or None when it counts."""
    import torch

    if not isinstance(tensor, torch.nn.Parameter):
        return "not a parameter"
    if not tensor.requires_grad:
        return "frozen"
    if getattr(tensor, "_ddp_ignored", False) is True:
        return "DDP-ignored"
    return None


def real_ids(gm, example_inputs) -> dict[int, object]:
    """``id(example value) -> real input`` for each placeholder whose
    ``meta["example_value"]`` is not the input itself: the FakeTensors Dynamo
    puts on a captured graph stand for the real parameters (and lose their
    attributes, ``_ddp_ignored`` among them)."""
    out: dict[int, object] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, example_inputs, strict=False):
        fake = node.meta.get("example_value")
        if fake is not None and fake is not value:
            out[id(fake)] = value
    return out


def graph_facts(gm, example_inputs) -> GraphFacts:
    import torch

    placeholder_value = {}
    args_iter = iter(example_inputs)
    nodes, users, inputs_of, reads, uncounted = [], {}, {}, {}, {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            placeholder_value[node.name] = next(args_iter, None)
            continue
        if node.op == "output":
            continue
        nodes.append(node.name)
        users[node.name] = [OUTPUT if u.op == "output" else u.name for u in node.users]
        read_nodes: list = []
        torch.fx.node.map_arg((node.args, node.kwargs), read_nodes.append)
        inputs_of[node.name] = [n.name for n in read_nodes]
        tensors = []
        if node.op == "call_module":
            sub = gm.get_submodule(node.target)
            tensors = [(f"{node.target}.{n}", p) for n, p in sub.named_parameters()]
        elif node.op == "get_attr":
            obj = gm
            for part in node.target.split("."):
                obj = getattr(obj, part)
            tensors = [(node.target, obj)]
        elif node.op in ("call_function", "call_method"):
            tensors = [(n.name, placeholder_value.get(n.name)) for n in read_nodes if n.op == "placeholder"]
            receiver = node.args[0] if node.op == "call_method" and node.args else None
            if getattr(receiver, "op", None) == "get_attr":
                # a module read by get_attr and called by method (``self.lin.forward(h)``):
                # its parameters are read where it is called
                module = _attr_value(gm, receiver.name)
                if isinstance(module, torch.nn.Module):
                    tensors += [(f"{receiver.target}.{n}", p) for n, p in module.named_parameters()]
        reads[node.name] = []
        for name, t in tensors:
            if not isinstance(t, torch.Tensor):
                continue
            why = _uncounted_reason(t)
            if why is None:
                reads[node.name].append((id(t), t.untyped_storage().nbytes(), name))
            else:
                uncounted.setdefault(id(t), (name, why))
    attrs = {n.name for n in gm.graph.nodes if n.op == "get_attr"}
    facts = GraphFacts(nodes, {n: i for i, n in enumerate(nodes)}, users, inputs_of, reads, attrs,
                       real={fake: id(value) for fake, value in real_ids(gm, example_inputs).items()},
                       uncounted=uncounted)
    seen: set = set()
    for name in reversed(nodes):
        size, ids = 0, set()
        for pid, nbytes, _ in reads[name]:
            if pid not in seen:
                seen.add(pid)
                ids.add(pid)
                size += nbytes
        facts.attributed[name] = size
        facts.attributed_ids[name] = ids
        facts.total += size
    return facts


def _attr_value(gm, name):
    node = next((n for n in gm.graph.nodes if n.name == name and n.op == "get_attr"), None)
    if node is None:
        return None
    obj = gm
    for part in node.target.split("."):
        obj = getattr(obj, part, None)
    return obj


# --------------------------------------------------------------------------- SPL-1


def check_cap_rejected(error: BaseException | None, first_cap: int, cap: int) -> list[Violation]:
    if error is None:
        return [Violation("SPL-1", f"first_bucket_cap={first_cap} > bucket_bytes_cap={cap} should be rejected, but the split went ahead")]
    if isinstance(error, NotImplementedError) or not isinstance(error, (ValueError, AssertionError, TypeError)):
        return [Violation("SPL-1", f"first_bucket_cap > bucket_bytes_cap should raise ValueError/AssertionError, got {type(error).__name__}: {error}")]
    if not str(error).strip():
        return [Violation("SPL-1", f"first_bucket_cap > bucket_bytes_cap raised {type(error).__name__} with no message")]
    return []


def check_default_first_cap(default_plan, explicit_plan, default_error, explicit_error, default_bytes, cap) -> list[Violation]:
    """An unset first cap behaves as DDP's default (``default_bytes``): the
    same plan, or the same rejection when the default exceeds ``cap``."""
    if (default_error is None) != (explicit_error is None):
        got = "raised " + type(default_error).__name__ if default_error else "split"
        want = "raised " + type(explicit_error).__name__ if explicit_error else "split"
        return [Violation("SPL-1", f"with bucket_bytes_cap={cap}, an unset first cap should act as first_bucket_cap={default_bytes} (which {want}), but it {got}")]
    if default_error is None and _shape(default_plan) != _shape(explicit_plan):
        return [Violation("SPL-1", f"unset first cap should plan as first_bucket_cap={default_bytes}: expected {_shape(explicit_plan)}, got {_shape(default_plan)}")]
    return []


def _shape(buckets):
    return [(b.nodes, b.size) for b in buckets]


# --------------------------------------------------------------------------- SPL-2..8


def check_plan(facts: GraphFacts, buckets, bucket_cap: int, first_cap: int, ids=("SPL-2", "SPL-3", "SPL-5", "SPL-6", "SPL-7", "SPL-8")) -> list[Violation]:
    out = check_partition(facts, buckets)
    if out:
        return out  # the other rules are about a partition
    checks = {
        "SPL-3": check_sizes,
        "SPL-5": check_closing,
        "SPL-6": check_outputs,
        "SPL-7": check_extensions,
        "SPL-8": check_fused,
    }
    for inv, fn in checks.items():
        if inv in ids:
            out += fn(facts, buckets, bucket_cap, first_cap)
    return out


def check_partition(facts: GraphFacts, buckets) -> list[Violation]:
    flat = [n for b in buckets for n in b.nodes]
    if flat == facts.nodes:
        return []
    seen: dict = {}
    for n in flat:
        seen[n] = seen.get(n, 0) + 1
    twice = [n for n, c in seen.items() if c > 1]
    missing = [n for n in facts.nodes if n not in seen]
    foreign = [n for n in seen if n not in facts.position]
    if twice or missing or foreign:
        what = "; ".join(
            f"{label} {short(names)}" for label, names in (("in several buckets:", twice), ("in none:", missing), ("not op nodes of the graph:", foreign)) if names
        )
        return [Violation("SPL-2", f"every op node should be in exactly one bucket, but nodes are {what}")]
    return [Violation("SPL-2", f"buckets should be contiguous runs in graph order, got {[short(b.nodes, 4) for b in buckets]}")]


def _param_labels(facts) -> dict[int, str]:
    """A name per tensor read in the graph (real ids), in graph order: the
    counted parameters as read, the rest with why they count zero."""
    labels: dict[int, str] = {}
    for node in facts.nodes:
        for pid, _, name in facts.reads[node]:
            labels.setdefault(pid, name)
    for pid, (name, why) in facts.uncounted.items():
        labels.setdefault(pid, f"{name} ({why})")
    return labels


def _bucket_size(facts, bucket) -> int:
    return sum(facts.attributed[n] for n in bucket.nodes)


def _held_ids(facts, bucket) -> set:
    return set().union(*(facts.attributed_ids[n] for n in bucket.nodes))


def _listing_errors(facts, bucket, labels, home) -> tuple[list[str], list[str]]:
    """What ``bucket`` lists that it does not hold, and what it holds but
    does not list, named as the graph names them (real parameters: a fake's
    id is its real tensor's). How an implementation spells a parameter
    (torch 2.4 joins module and name with "_", later "." or the
    placeholder's name) is not the spec's business."""
    listed = dict.fromkeys(facts.real_id(pid) for pid in bucket.param_ids)
    held = _held_ids(facts, bucket)
    wrong = []
    for pid in listed:
        if pid in held:
            continue
        label = labels.get(pid, "<not read in the graph>")
        wrong.append(f"{label} (last read in bucket {home[pid]})" if pid in home else label)
    missing = [labels[pid] for pid in labels if pid in held and pid not in listed]
    return wrong, missing


def check_sizes(facts, buckets, *_caps) -> list[Violation]:
    out = []
    labels = _param_labels(facts)
    home = {pid: i for i, b in enumerate(buckets) for pid in _held_ids(facts, b)}
    for i, b in enumerate(buckets):
        want = _bucket_size(facts, b)
        wrong, missing = _listing_errors(facts, b, labels, home) if b.param_ids else ([], [])
        listing = "; ".join(text for text, names in (
            (f"it lists {short(wrong, 6)}, which it does not hold", wrong),
            (f"it leaves out {short(missing, 6)}", missing)) if names)
        # The lists in full are the violation's identity: a known bug explains
        # it only if it lists exactly the same parameters wrongly.
        evidence = (tuple(wrong), tuple(missing))
        if b.size != want:
            out.append(Violation("SPL-3", f"bucket {i} ({short(b.nodes, 4)}) should hold {want} bytes of trainable, non-ignored parameters, got size {b.size}"
                                          + (f"; {listing}" if listing else ""), evidence=evidence))
        elif wrong or missing:
            out.append(Violation("SPL-3", f"bucket {i} ({short(b.nodes, 4)}) should list the trainable, non-ignored parameters last read in it; {listing}",
                                 detail=f"the implementation names them {short(b.params, 6)}", evidence=evidence))
    return out


def check_counted_once(facts, buckets) -> list[Violation]:
    out = []
    ids = [facts.real_id(pid) for b in buckets for pid in b.param_ids]
    if len(ids) != len(set(ids)):
        # Named as the graph reads them, not as the implementation labels
        # them: the message then describes the plan the same way whoever made it.
        labels = _param_labels(facts)
        repeated = sorted({labels.get(pid, "<not a parameter of the graph>") for pid in ids if ids.count(pid) > 1})
        out.append(Violation("SPL-4", f"each parameter should be counted once, but the plan lists {len(ids)} entries for {len(set(ids))} parameters; counted more than once: {short(repeated, 8)}",
                             evidence=tuple(repeated)))
    got = sum(b.size for b in buckets)
    if got != facts.total:
        out.append(Violation("SPL-4", f"bucket sizes should add up to the {facts.total} bytes of distinct trainable parameters, got {got}"))
    elif not out:
        for i, b in enumerate(buckets):
            want = _bucket_size(facts, b)
            if b.size != want:
                out.append(Violation("SPL-4", f"a parameter read by several nodes counts in the bucket of its last read: bucket {i} should hold {want} bytes, got {b.size}"))
    return out


def _walk(facts, bucket):
    """Walk a bucket from its last node back: yields ``(k, size, external)``
    for the suffix ``nodes[k:]``."""
    end = facts.position[bucket.nodes[-1]]
    size, external = 0, False
    for k in range(len(bucket.nodes) - 1, -1, -1):
        name = bucket.nodes[k]
        size += facts.attributed[name]
        external = external or _feeds_later(facts, name, end)
        yield k, size, external


def _feeds_later(facts, name, end) -> bool:
    """Whether node ``name`` is an output of a bucket ending at position
    ``end``. A ``get_attr`` never is: split_module keeps it in the parent
    graph and hands its value to each submodule that reads it."""
    if name in facts.attrs:
        return False
    return any(u == OUTPUT or facts.position[u] > end for u in facts.users[name])


def _cap_of(i, buckets, bucket_cap, first_cap):
    return first_cap if i == len(buckets) - 1 else bucket_cap


def _fusion_point(facts, bucket, cap):
    """In the earliest bucket: the index where the walk met its cap with an
    external output (the rest before it is a fused preamble), or None."""
    for k, size, external in _walk(facts, bucket):
        if k > 0 and size >= cap and external:
            return k
    return None


def check_closing(facts, buckets, bucket_cap, first_cap) -> list[Violation]:
    out = []
    for i, b in enumerate(buckets):
        cap = _cap_of(i, buckets, bucket_cap, first_cap)
        if i == 0:
            k = _fusion_point(facts, b, cap)
            if k is not None:
                early = sum(facts.attributed[n] for n in b.nodes[:k])
                if early:
                    out.append(Violation("SPL-5", f"bucket 0 reached its cap {cap} with an external output at {b.nodes[k]!r}; it should close there, but it goes on over {short(b.nodes[:k], 4)} holding {early} more bytes"))
            continue
        for k, size, external in _walk(facts, b):
            if k > 0 and size >= cap and external:
                out.append(Violation("SPL-5", f"bucket {i} reached its cap {cap} (size {size}) with an external output at {b.nodes[k]!r} and should close there, but it also takes {short(b.nodes[:k], 4)}"))
                break
            if k == 0 and not (size >= cap and external):
                why = f"its size {size} is below the cap {cap}" if size < cap else "it has no external output"
                out.append(Violation("SPL-5", f"bucket {i} ({short(b.nodes, 4)}) closed before {b.nodes[0]!r} although {why}"))
    return out


def check_outputs(facts, buckets, *_caps) -> list[Violation]:
    out = []
    for i, b in enumerate(buckets):
        end = facts.position[b.nodes[-1]]
        if not any(_feeds_later(facts, n, end) for n in b.nodes):
            out.append(Violation("SPL-6", f"bucket {i} ({short(b.nodes, 4)}) should have an output used outside it, but none of its nodes is"))
    return out


def extensions(facts, buckets, bucket_cap, first_cap) -> list[tuple[int, int]]:
    """Per bucket (graph order), the spec's ``(ops, bytes)`` it absorbed
    past its cap: ``(0, 0)`` for a bucket not extended. What both the
    buckets (SPL-7) and the logged extended-bucket table (SPL-13) report."""
    out = []
    for i, b in enumerate(buckets):
        cap = _cap_of(i, buckets, bucket_cap, first_cap)
        stop = (_fusion_point(facts, b, cap) or 0) if i == 0 else 0
        extra_ops, before, size = 0, None, 0
        for k, size_k, _external in _walk(facts, b):
            if k < stop:
                break
            if k < len(b.nodes) - 1 and size >= cap:
                extra_ops += 1
                if before is None:
                    before = size
            size = size_k
        out.append((extra_ops, size - before if before is not None else 0))
    return out


def check_extensions(facts, buckets, bucket_cap, first_cap) -> list[Violation]:
    out = []
    for i, (b, (extra_ops, extra_bytes)) in enumerate(zip(buckets, extensions(facts, buckets, bucket_cap, first_cap), strict=True)):
        cap = _cap_of(i, buckets, bucket_cap, first_cap)
        if (b.extra_ops, b.extra_bytes) != (extra_ops, extra_bytes):
            out.append(Violation("SPL-7", f"bucket {i} ({short(b.nodes, 4)}) was extended past its cap {cap} by {extra_ops} ops and {extra_bytes} bytes, but reports {b.extra_ops} ops and {b.extra_bytes} bytes"))
    return out


def check_fused(facts, buckets, *_caps) -> list[Violation]:
    if len(buckets) < 2:
        return []
    empty = [i for i, b in enumerate(buckets) if _bucket_size(facts, b) == 0]
    if not empty:
        return []
    return [Violation("SPL-8", f"with {len(buckets)} buckets none should be free of counted parameters, but buckets {empty} are (a parameter-free earliest bucket is fused into the next)")]


# --------------------------------------------------------------------------- SPL-13

_HEADER = re.compile(r"used bucket cap (\d+) and created (\d+) buckets")
_EXTENDED = re.compile(r"\bextended\b", re.IGNORECASE)
_HEADER_NO_COUNT = re.compile(r"used bucket cap (\d+) and produced the following buckets")


def parse_table(lines: list[str]):
    """``(header, rows, extended)`` from logged lines: the header's
    ``(cap, count)`` or None, bucket rows ``(index, size, name)`` and
    extension rows ``(index, ops, bytes)``; continuation rows inherit index
    and size. Both ``|`` and box-drawing (tabulate) tables are read."""
    header, rows, extended, section = None, [], [], None
    for line in lines:
        m = _HEADER.search(line)
        if m:
            header = (int(m.group(1)), int(m.group(2)))
            continue
        m = _HEADER_NO_COUNT.search(line)
        if m:
            # torch 2.0 states the cap but not the count: the rows must show the buckets
            header = (int(m.group(1)), None)
            continue
        cells = [c.strip() for c in re.split(r"[|│]", line)]
        if len(cells) < 3:
            continue
        if line.strip().startswith("│"):  # tabulate's simple_grid has outer borders
            cells = cells[1:-1]
        if len(cells) != 3:
            continue
        if cells[0] == "Index":
            section = "extended" if "Extra" in cells[1] else "rows"
            continue
        if section == "rows":
            if cells[0]:
                rows.append((int(cells[0]), int(cells[1]), cells[2]))
            elif rows:
                rows.append((rows[-1][0], rows[-1][1], cells[2]))
        elif section == "extended" and cells[0]:
            extended.append((int(cells[0]), int(cells[1]), int(cells[2])))
    return header, rows, extended


def check_table(lines: list[str], buckets, bucket_cap: int, facts, first_cap: int,
                count_logged: bool = True) -> list[Violation]:
    """The table numbers buckets like DDP: 0 is the bucket holding the
    graph's last nodes. Row listings are optional (the seed prints them only
    when ``tabulate`` is installed) but must match when present; with them,
    the extended-bucket table lists every bucket the spec extends past its
    cap, with the ops and bytes it absorbed, taken from the graph (``facts``),
    not from what the implementation says of its buckets.

    ``count_logged=False`` (an implementation that gives the count only in
    its rows, ``SplittingArea.logs_bucket_count``): a log with neither count
    nor rows is not a violation; the cap and everything else still are."""
    header, rows, extended = parse_table(lines)
    has_params = any(b.params for b in buckets)
    if has_params and header is None:
        return [Violation("SPL-13", f"the log should state the bucket cap and the number of buckets ({len(buckets)}), got {short(lines, 4)}")]
    if count_logged and header is not None and header[1] is None and has_params and not rows:
        return [Violation("SPL-13", f"the log states the cap but neither the number of buckets ({len(buckets)}) nor their rows: {short(lines, 4)}")]
    if header is not None and header != (bucket_cap, header[1] if header[1] is None else len(buckets)):
        return [Violation("SPL-13", f"the table should say cap {bucket_cap} and {len(buckets)} buckets, it says cap {header[0]} and {header[1]} buckets")]
    numbered = list(enumerate(reversed(buckets)))
    if rows:
        want = [(i, b.size, name) for i, b in numbered for name in b.params]
        if rows != want:
            return [Violation("SPL-13", f"the table rows should be (index, size, parameter) {short(want, 6)}, got {short(rows, 6)}")]
    absorbed = list(reversed(extensions(facts, buckets, bucket_cap, first_cap)))
    want = [(i, ops, size) for i, (ops, size) in enumerate(absorbed) if ops]
    # without rows the log has no tables at all (tabulate missing), so no
    # extended-bucket table either; with them, a missing one is a lost report
    if (rows or extended) and extended != want:
        return [Violation("SPL-13", f"the extended-bucket table (index, extra ops, extra bytes) should be {want}, got {extended}")]
    # the note that buckets grew past their caps is the one report of it a
    # log without tables still carries, so it must follow the spec both ways
    said = any(_EXTENDED.search(line) for line in lines if not re.search(r"[|│]", line))
    if has_params and said != bool(want):
        return [Violation("SPL-13", f"the log should say that buckets were extended past their caps "
                                    f"(the spec extends {len(want)}: (index, extra ops, extra bytes) {want})" if want else
                                    f"the log says buckets were extended past their caps, but the spec extends none: "
                                    f"{short([line for line in lines if _EXTENDED.search(line)], 2)}")]
    return []


# --------------------------------------------------------------------------- SPL-15


def check_ddp_assignment(facts, buckets, bucket_cap, first_cap, assign) -> list[Violation]:
    """Compare the grouping of parameter-holding nodes with DDP's own
    assignment ``assign(tensors, [first_cap, bucket_cap]) -> bucket indices``.

    DDP buckets parameter tensors in reverse registration order and may close
    a bucket between two tensors of one layer; DDPOptimizer can only cut
    between nodes. The comparable quantity is therefore the sequence of
    per-node parameter bytes walked from the last node: DDP is given one
    uint8 tensor per parameter-holding node, as many elements as the node's
    counted bytes, all of one dtype so DDP's per-dtype grouping does not
    interfere. For a module chain (every
    node's output feeds the next, so no bucket is ever extended) both
    algorithms close a bucket right after the tensor that fills it."""
    import torch

    holders = [n for n in reversed(facts.nodes) if facts.attributed[n]]
    if not holders:
        return []
    bucket_of: dict = {}
    for i, b in enumerate(buckets):
        for n in b.nodes:
            bucket_of.setdefault(n, i)
    lost = [n for n in holders if n not in bucket_of]
    if lost:
        return [Violation("SPL-15", f"the plan puts the parameter-holding nodes {short(lost, 6)} in no bucket, so it cannot group them as DDP's assignment does")]
    groups: list = []
    for k, n in enumerate(holders):
        if groups and bucket_of[holders[k - 1]] == bucket_of[n]:
            groups[-1].append(k)
        else:
            groups.append([k])
    tensors = [torch.empty(facts.attributed[n], dtype=torch.uint8) for n in holders]
    ddp = [list(g) for g in assign(tensors, [first_cap, bucket_cap])]
    if ddp != groups:
        return [Violation("SPL-15", f"DDP's bucket assignment groups the parameter-holding nodes (walked from the last) as {ddp}, the plan as {groups} ({short(holders, 6)})")]
    return []


def diff_against_reference(buckets, reference_buckets) -> list[Violation]:
    """Differential: an implementation's plan against the reference's for the
    same graph and caps (node runs first, then sizes)."""
    got, want = [len(b.nodes) for b in buckets], [len(b.nodes) for b in reference_buckets]
    if [b.nodes for b in buckets] != [b.nodes for b in reference_buckets]:
        return [Violation("SPL-5", f"the reference cuts the graph as {want} nodes per bucket, got {got}")]
    sizes, ref_sizes = [b.size for b in buckets], [b.size for b in reference_buckets]
    if sizes != ref_sizes:
        return [Violation("SPL-3", f"the reference sizes the buckets {ref_sizes}, got {sizes}")]
    return []


def _split_kept(splitting, gm, example_inputs, cap, first):
    return splitting.split(gm, example_inputs, bucket_bytes_cap=cap, first_bucket_cap=first,
                           backend=lambda sub_gm, _inputs: sub_gm.forward)


def check_captured_split(splitting, gm, example_inputs, facts, cap: int, first: int) -> list[Violation]:
    """SPL-2..8 on one split of a graph Dynamo captured from a whole model
    (the corpus, users' models); each submodule is kept uncompiled."""
    result = _split_kept(splitting, gm, example_inputs, cap, first)
    return check_plan(facts, result.buckets, cap, first) + check_counted_once(facts, result.buckets)


def ddp_assignment_unjudgeable(gm, example_inputs, facts, cap: int, first: int) -> str | None:
    """Why SPL-15 cannot judge any plan of this captured graph with these
    caps, decided from the graph and the spec's own plan before an
    implementation runs; None where it can."""
    import torch.distributed as dist

    from ..reference.splitting import plan

    if not dist.is_available():
        return "torch.distributed is not available, and DDP's bucket assignment is part of it"
    if not facts.total:
        return "no node of the graph reads a trainable, non-ignored parameter: there is nothing to assign"
    if any(b.extra_ops for b in plan(gm, cap, first, example_inputs)):
        # DDP cuts between tensors by size alone; a bucket extended to reach
        # an output has no counterpart in its assignment
        return "the spec's plan extends a bucket past its cap to reach an output, which DDP's assignment by size has no counterpart for"
    return None


def check_captured_assignment(splitting, gm, example_inputs, facts, cap: int, first: int) -> list[Violation]:
    """SPL-15 on one split of a captured graph, where
    :func:`ddp_assignment_unjudgeable` found nothing against it."""
    import torch.distributed as dist

    def assign(tensors, limits):
        return dist._compute_bucket_assignment_by_size(tensors, limits)[0]

    result = _split_kept(splitting, gm, example_inputs, cap, first)
    return check_ddp_assignment(facts, result.buckets, cap, first, assign)
