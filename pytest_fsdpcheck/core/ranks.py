"""How many real ranks the distributed checks start for a world size: the
plugin's options decide it and the report's header says it; nothing here
imports pytest or torch (the xdist controller imports neither)."""

from __future__ import annotations

#: the most real ranks the distributed checks (SPL-16, FS2-9) start on this
#: host on CPU, whatever --fsdpcheck-world-size asks (on CUDA: as many as
#: there are visible GPUs, if more): that option is the world users' plans
#: are checked at in the simulated tier (FS2-10, up to 4096 ranks in one
#: process), never a count of processes to spawn
SPAWNED_RANKS_CAP = 3


def spawned_ranks(asked: int, gpus: int = 0) -> int:
    """The real ranks started on this host for ``--fsdpcheck-world-size
    asked``: ``asked``, at most :data:`SPAWNED_RANKS_CAP` or the visible
    GPUs (``gpus``) where they are more."""
    return min(asked, max(SPAWNED_RANKS_CAP, gpus))


def spawned_ranks_note(asked: int | None) -> str | None:
    """The header's one line where the real ranks may be fewer than asked
    (decided without torch: the xdist controller imports none); None where
    they are not."""
    if asked is None or asked <= SPAWNED_RANKS_CAP:
        return None
    return (f"--fsdpcheck-world-size {asked}: users' plans are checked at {asked} simulated ranks (FS2-10); "
            f"the real ranks of SPL-16 and FS2-9 are at most {SPAWNED_RANKS_CAP} on CPU and the visible GPUs "
            f"on CUDA (torchrun's own world under python -m pytest_fsdpcheck.distributed)")
