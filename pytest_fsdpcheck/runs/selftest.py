"""The world's own self-test, and the distributed checks' plain-collective controls.

A distributed check may call a failure the world's (``ERROR``, never a
``FAIL``) only when the world fails a test of its own, one that runs no code
under test: plain collectives (``torch.distributed`` on plain tensors, no
DDP, no ``fully_shard``, no Dynamo) on tensors whose results every rank knows
in advance, and the ranks' agreement on what they were given (the same model,
the same batches). :func:`self_test` runs it at the start of each rank's work
and raises :class:`WorldSelfTestFailed` with the first thing that was wrong.

:func:`averaged` is what the controls of SPL-16 and FS2-9 reduce with:
each gradient of the unsharded model divided by the world size and summed
over the ranks with ``all_reduce``, in the reduction's dtype, as DDP and
FSDP2 average, but through nothing of theirs.

Known values are integers held exactly in float32 (below 2**24), so every
sum is exact in any order and a result is compared for equality.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

#: the collectives each task's steps use (DDP: broadcast of the parameters at
#: its start, all-reduce of the gradient buckets; FSDP2: all-gather of the
#: parameters and reduce-scatter of the gradients into flat tensors)
DDP_COLLECTIVES = ("all_reduce", "broadcast", "all_gather")
FSDP2_COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter")

#: numbers per rank in each known tensor
_N = 64


class WorldSelfTestFailed(RuntimeError):
    """This world's collectives, or its ranks' agreement, failed the self-test:
    no check run in it can judge an implementation. The message is one line."""


def _known(rank: int, salt: int, n: int = _N) -> torch.Tensor:
    """Rank ``rank``'s known tensor: small integers, different per rank and
    position, reproducible by every rank."""
    generator = torch.Generator().manual_seed(7919 * salt + rank)
    return torch.randint(-1000, 1000, (n,), generator=generator).to(torch.float32)


def _show(have: torch.Tensor, want: torch.Tensor) -> str:
    if have.shape != want.shape:
        return f"shape {tuple(have.shape)}, expected {tuple(want.shape)}"
    wrong = (have != want).nonzero().flatten()
    i = int(wrong[0]) if len(wrong) else 0
    return f"{len(wrong)} of {want.numel()} values wrong, first at {i}: {have[i].item():g} for {want[i].item():g}"


def _check_collectives(rank: int, world: int, device, collectives) -> list[str]:
    """Each collective that gave a wrong result on this rank, with what it
    gave. Every collective runs whatever an earlier one gave, so the ranks
    stay in step."""
    ranks = range(world)
    wrong = []
    if "all_reduce" in collectives:
        got = _known(rank, 1).to(device)
        dist.all_reduce(got)
        want = sum(_known(r, 1) for r in ranks)
        if not torch.equal(got.cpu(), want):
            wrong.append(f"all_reduce (sum) of known values: {_show(got.cpu(), want)}")
    if "broadcast" in collectives:
        got = (_known(0, 2) if rank == 0 else torch.zeros(_N)).to(device)
        dist.broadcast(got, src=0)
        if not torch.equal(got.cpu(), _known(0, 2)):
            wrong.append(f"broadcast from rank 0 of known values: {_show(got.cpu(), _known(0, 2))}")
    if "all_gather" in collectives:
        out = [torch.zeros(_N, device=device) for _ in ranks]
        dist.all_gather(out, _known(rank, 3).to(device))
        for r in ranks:
            if not torch.equal(out[r].cpu(), _known(r, 3)):
                wrong.append(f"all_gather of known values: rank {r}'s part: {_show(out[r].cpu(), _known(r, 3))}")
                break
    if "all_gather_into_tensor" in collectives:
        flat = torch.zeros(world * _N, device=device)
        gather = getattr(dist, "all_gather_single", None)
        if gather is not None:
            gather(flat, _known(rank, 4).to(device))
        else:
            dist.all_gather_into_tensor(flat, _known(rank, 4).to(device))
        want = torch.cat([_known(r, 4) for r in ranks])
        if not torch.equal(flat.cpu(), want):
            wrong.append(f"all_gather into one tensor of known values: {_show(flat.cpu(), want)}")
    if "reduce_scatter" in collectives:
        # each rank's input is world chunks; chunk c of the sum lands on rank c
        out = torch.zeros(_N, device=device)
        scatter = getattr(dist, "reduce_scatter_single", None)
        if scatter is not None:
            scatter(output=out, input=_known(rank, 5, world * _N).to(device))
        else:
            dist.reduce_scatter_tensor(out, _known(rank, 5, world * _N).to(device))
        want = sum(_known(r, 5, world * _N) for r in ranks)[rank * _N:(rank + 1) * _N]
        if not torch.equal(out.cpu(), want):
            wrong.append(f"reduce_scatter (sum) of known values: {_show(out.cpu(), want)}")
    return wrong


def fingerprint(tensors: dict) -> torch.Tensor:
    """Per named tensor, three float64 numbers that differ when its values
    do (sum, sum of squares, sum weighted by position): what ranks compare
    to agree on their inputs without sending them."""
    rows = []
    for name in sorted(tensors):
        flat = tensors[name].detach().reshape(-1).to(torch.float64).cpu()
        position = torch.arange(1, flat.numel() + 1, dtype=torch.float64)
        rows.append(torch.stack([flat.sum(), flat.square().sum(), (flat * position).sum()]))
    return torch.stack(rows) if rows else torch.zeros(0, 3, dtype=torch.float64)


def _check_agreement(rank: int, world: int, device, inputs: dict) -> str | None:
    """The first input (by name) some rank holds differently from rank 0."""
    mine = fingerprint(inputs).to(device)
    everyone = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine)
    names = sorted(inputs)
    for r in range(1, world):
        differs = (everyone[r].cpu() != everyone[0].cpu()).any(dim=1).nonzero().flatten()
        if len(differs):
            return (f"ranks disagree on their inputs: {names[int(differs[0])]} differs between rank 0 and rank {r} "
                    "(each rank must build the same model and draw the same batches from the same seeds)")
    return None


def self_test(device, collectives, inputs: dict, real=None) -> None:
    """The world's self-test, on every rank at once (process group up).
    ``collectives``: names from :data:`DDP_COLLECTIVES`/:data:`FSDP2_COLLECTIVES`;
    ``inputs``: ``{name: tensor}`` that every rank must hold alike;
    ``real``: a callable run on every rank after those (the same collectives
    on every rank), returning why the collectives failed on real tensors, or
    None.

    Every rank tells the others whether it passed (a flag all-reduced with
    MAX), so all ranks stop together; a rank whose own check failed raises
    its own reason whatever the flag says (the flag travels through the
    collective under test)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    why = None
    try:
        wrong = _check_collectives(rank, world, device, collectives)
        wrong.append(_check_agreement(rank, world, device, inputs))
        if real is not None:
            wrong.append(real())
        why = next((w for w in wrong if w), None)
    except Exception as exc:  # noqa: BLE001 - a collective that raises fails the self-test too
        why = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
    flag = torch.tensor([1.0 if why else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if why:
        raise WorldSelfTestFailed(f"rank {rank}: {why}")
    if flag.item() != 0:
        raise WorldSelfTestFailed(f"rank {rank}: another rank failed the world's self-test")


def averaged(grads: dict, world: int, reduce_dtype=None, skip=(), device=None) -> dict:
    """``grads`` (name -> this rank's gradient) averaged over the ranks with
    plain ``all_reduce``: each divided by the world size, then summed, in
    ``reduce_dtype`` (default: its own) and cast back, on ``device`` (default:
    the gradient's own; NCCL reduces only CUDA tensors). Names in ``skip``
    (parameters nothing reduces) keep this rank's gradient. A collective on
    every rank: every rank must pass the same names in the same order."""
    out = {}
    for name, grad in grads.items():
        if name in skip or grad is None:
            out[name] = grad
            continue
        term = grad.detach().to(device=device or grad.device, dtype=reduce_dtype or grad.dtype) / world
        dist.all_reduce(term)
        out[name] = term.to(device=grad.device, dtype=grad.dtype)
    return out


def check_against_local(averaged_grads: dict, local_mean: dict, rtol: float, atol: float, skip=()) -> str | None:
    """The world's all-reduce on real tensors: ``averaged_grads`` (the
    control's gradients after :func:`averaged`) against ``local_mean``, the
    same average computed on this rank alone from every rank's batch (the
    gradient of the mean loss). Both are fp32 sums of the same terms in
    another order: they differ by rounding only, within ``rtol``/``atol``."""
    for name, want in local_mean.items():
        if name in skip or want is None:
            continue
        have = averaged_grads.get(name)
        if have is None or have.shape != want.shape or not torch.allclose(have.cpu(), want.cpu(), rtol=rtol, atol=atol):
            diff = "missing" if have is None else (
                f"max abs difference {(have.cpu() - want.cpu()).abs().max().item():.3g}" if have.shape == want.shape else "shape")
            return (f"all_reduce of the unsharded model's gradients of {name} is not the average this rank computes "
                    f"alone from every rank's batch ({diff}; rtol {rtol:g}, atol {atol:g})")
    return None
