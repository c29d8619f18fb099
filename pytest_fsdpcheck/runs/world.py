"""Where the ranks of a distributed check run, and what a failed world is.

NCCL needs one GPU per rank: two ranks on one device fail inside their
first collective ("Duplicate GPU detected"), after the checks have started,
and every implementation's column would then carry the machine's failure.
So the device is chosen before any rank joins a process group: CUDA only
where every rank has a GPU of its own, else gloo on CPU; a user who forced
CUDA is stopped with the reason instead.

The decision functions are pure (no torch import): the ranks' places are
gathered by :func:`exchange_places` through the rendezvous store, which
exists before any backend does.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Place:
    """Where one rank runs: its host, the GPUs it sees there
    (``CUDA_VISIBLE_DEVICES`` as set, None when unset) and the device index
    it would take (``LOCAL_RANK``)."""

    rank: int
    host: str
    gpus: int
    visible: str | None
    local_rank: int


def visible_gpus() -> int:
    """The GPUs this process sees (``CUDA_VISIBLE_DEVICES`` applied)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def here(rank: int, local_rank: int, gpus: int) -> Place:
    return Place(rank, socket.gethostname(), gpus, os.environ.get("CUDA_VISIBLE_DEVICES"), local_rank)


def shared_gpus(places: list[Place]) -> str | None:
    """Why some ranks would share a GPU (or have none), or None when every
    rank has a device of its own. Ranks see the same GPUs when they share a
    host and a ``CUDA_VISIBLE_DEVICES``."""
    groups: dict[tuple[str, str | None], list[Place]] = {}
    for place in places:
        groups.setdefault((place.host, place.visible), []).append(place)
    for (host, visible), ranks in groups.items():
        gpus = min(p.gpus for p in ranks)
        seen = f"{gpus} visible GPU{'s' if gpus != 1 else ''} (CUDA_VISIBLE_DEVICES={visible if visible is not None else 'unset'})"
        if len(ranks) > gpus:
            return f"{len(ranks)} ranks on host {host} share {seen}"
        taken: dict[int, int] = {}
        for p in sorted(ranks, key=lambda p: p.rank):
            if p.local_rank >= gpus:
                return f"rank {p.rank} on host {host} would use cuda:{p.local_rank}, the host has {seen}"
            if p.local_rank in taken:
                return (f"ranks {taken[p.local_rank]} and {p.rank} on host {host} would both use "
                        f"cuda:{p.local_rank} (LOCAL_RANK {p.local_rank}; {seen})")
            taken[p.local_rank] = p.rank
    return None


@dataclass(frozen=True)
class Choice:
    device: str  # "cpu" or "cuda"
    note: str | None = None  # why CUDA was not used although torch sees a GPU
    stop: str | None = None  # the one-line reason no rank may start

    @property
    def backend(self) -> str:
        return "nccl" if self.device == "cuda" else "gloo"


def choose_device(requested: str | None, cuda_available: bool, shared: str | None) -> Choice:
    """``requested``: ``cpu``, ``cuda`` or None (pick). ``shared``: what
    :func:`shared_gpus` said of the world."""
    if requested == "cpu":
        return Choice("cpu")
    if not cuda_available:
        if requested == "cuda":
            return Choice("cpu", stop="--fsdpcheck-device cuda but torch sees no CUDA device")
        return Choice("cpu")
    if shared is not None:
        if requested == "cuda":
            return Choice("cpu", stop=f"--fsdpcheck-device cuda, but {shared}: NCCL needs a GPU of its own for "
                                      "each rank; start fewer ranks per host, or drop --fsdpcheck-device cuda to run "
                                      "them with gloo on CPU")
        return Choice("cpu", note=f"gloo on CPU: {shared}")
    return Choice("cuda")


def exchange_places(store, place: Place, world_size: int, decide, timeout_s: float) -> Choice:
    """Every rank's :class:`Place` to rank 0 through the rendezvous
    ``store``, which decides with ``decide(places)`` and hands the same
    :class:`Choice` to every rank (one reader of all places: no rank makes
    world-size many requests)."""
    from datetime import timedelta

    store.set_timeout(timedelta(seconds=timeout_s))
    store.set(f"fsdpcheck/place/{place.rank}", json.dumps(asdict(place)))
    if place.rank == 0:
        keys = [f"fsdpcheck/place/{r}" for r in range(world_size)]
        store.wait(keys)
        places = [Place(**json.loads(store.get(k))) for k in keys]
        store.set("fsdpcheck/choice", json.dumps(asdict(decide(places))))
    store.wait(["fsdpcheck/choice"])
    return Choice(**json.loads(store.get("fsdpcheck/choice")))


def world_record(backend: str, device: str, world_size: int) -> dict:
    """What a rank records of its world (named by
    :func:`pytest_fsdpcheck.checks.distributed.describe_world` when the world fails)."""
    import torch

    return {"backend": backend, "device": device, "world_size": world_size, "host": socket.gethostname(),
            "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "torch": torch.__version__}
