"""Starting a distributed check's ranks, and what ranks share once started:
the rank-launch plumbing every runner uses (:mod:`~pytest_fsdpcheck.runs.ddp_run`
for SPL-16 and FS2-9, :mod:`~pytest_fsdpcheck.runs.plan_world` for users' plans).

A free port for the process group; whether this process is a rank torchrun
already started (:func:`launched_by_torchrun`); the ranks' environment and
how they start (a fork server that preloaded torch on CPU, spawn on CUDA);
:func:`spawn_ranks`, which starts them, waits, and collects the record each
rank saved; :func:`all_gather_objects`, every rank's picklable record; and
a rank's device. Nothing here knows what a rank runs: the runner passes its
own ``rank_main`` and job.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import time
from pathlib import Path

import torch


def free_port() -> int:
    """A port the OS just handed out (closed again before the ranks bind it)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


TORCHRUN_ENV = "FSDPCHECK_TORCHRUN"


def launched_by_torchrun() -> bool:
    """True inside ``python -m pytest_fsdpcheck.distributed`` under torchrun:
    this process is one rank of a process group that is already up."""
    import torch.distributed as dist

    return os.environ.get(TORCHRUN_ENV) == "1" and dist.is_available() and dist.is_initialized()


#: The ranks' own environment (never this process's): one intra-op thread
#: (tiny tensors; as many ranks as there are, beside every xdist worker, on
#: a machine whose cores torch would otherwise give to each of them), and
#: Inductor compiling in the rank itself rather than starting a pool of one
#: compile process per core in every rank.
RANK_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}


def rank_environment(device: str) -> dict[str, str]:
    """What a rank started for ``device`` runs with: :data:`RANK_ENV`, and
    on CPU no visible GPU, so nothing in a gloo rank initialises CUDA (its
    context, and its libraries, cost seconds per rank where a GPU is present)."""
    env = dict(RANK_ENV)
    if device != "cuda":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


@contextlib.contextmanager
def _children_environment(env: dict[str, str]):
    """``env`` in ``os.environ`` only while the ranks are started (spawned
    children copy it then); this process's own values are put back."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


#: what the CPU ranks' fork server imports once, so that each rank is forked
#: with torch loaded rather than importing it again (about 3 s of CPU per
#: rank, more than most ranks' whole check). Nothing here runs an operator
#: or starts a thread as it is imported, so a fork of it is sound.
RANK_PRELOAD = ("torch", "torch.distributed", "torch.distributed.fsdp", "torch.nn.parallel")


def _rank_start(device: str) -> str:
    """How ranks start: CPU ranks fork from a fork server that preloaded
    :data:`RANK_PRELOAD` (where the platform has one); CUDA ranks are
    spawned, each a new interpreter, so nothing of CUDA is ever inherited."""
    import multiprocessing

    if device == "cuda" or "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    from multiprocessing import forkserver

    # Python keeps one fork server per process, its preload list read when it
    # starts: the ranks' modules are added to whatever another user of it set
    # (none is removed), and once it runs, it keeps what it has.
    preload = list(getattr(getattr(forkserver, "_forkserver", None), "_preload_modules", None) or ["__main__"])
    missing = [name for name in RANK_PRELOAD if name not in preload]
    if missing:
        forkserver.set_forkserver_preload(preload + missing)
    return "forkserver"


def _forked_rank(rank: int, rank_main, job, env: dict[str, str]) -> None:
    """A rank forked from the fork server: its environment is the server's,
    taken when the server started, so the one the ranks were started with
    (the parent's, and :func:`rank_environment`) is put in place first,
    before the rank reads any of it."""
    os.environ.clear()
    os.environ.update(env)
    rank_main(rank, job)


def spawn_ranks(rank_main, make_job, world_size: int, timeout: float, prefix: str, device: str = "cpu") -> list[dict]:
    """Start ``world_size`` processes running ``rank_main(rank, job)``, with
    ``job = make_job(out_dir)`` for a fresh folder where each rank saves
    ``rank{r}.pt``; wait at most ``timeout`` seconds, kill what is left, and
    return every rank's record (``error`` set for one that died or timed out).
    The ranks run with :func:`rank_environment` of ``device``, started as
    :func:`_rank_start` says."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix=prefix) as out_dir:
        job = make_job(out_dir)
        with _children_environment(rank_environment(device)):
            method = _rank_start(device)
            if method == "forkserver":
                target, args = _forked_rank, (rank_main, job, dict(os.environ))
            else:
                target, args = rank_main, (job,)
            context = mp.start_processes(target, args=args, nprocs=world_size, join=False, start_method=method)
        deadline = time.monotonic() + timeout
        timed_out = False
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                try:
                    if context.join(timeout=min(remaining, 1.0)):
                        break
                except Exception:  # noqa: BLE001 - a rank died outside _rank_main's guard; its file says the rest
                    break
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                process.join(5)
        results = []
        for rank in range(world_size):
            path = Path(out_dir) / f"rank{rank}.pt"
            if path.exists():
                results.append(torch.load(path, weights_only=False))
            else:
                why = f"timed out after {timeout:.0f}s and was killed" if timed_out else "died without a result"
                record = {"rank": rank, "error": why, "timed_out": timed_out}
                # how far a rank that never finished got, where its task records it (plan_run's phases)
                progress = Path(out_dir) / f"progress{rank}.pt"
                if progress.exists():
                    with contextlib.suppress(Exception):  # a file the kill cut short says nothing
                        record["progress"] = torch.load(progress, weights_only=False)
                results.append(record)
        return results


def all_gather_objects(obj) -> list:
    """Every rank's ``obj``, by rank. ``all_gather_object`` needs NumPy on
    this torch; the pickled bytes travel as a uint8 tensor instead (on the
    GPU for NCCL)."""
    import ctypes
    import io

    import torch.distributed as dist

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    data = bytearray(buffer.getvalue())
    on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    size = torch.tensor([len(data)], dtype=torch.int64, device=on)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    longest = int(max(s.item() for s in sizes))
    mine = torch.zeros(longest, dtype=torch.uint8)
    mine[: len(data)] = torch.frombuffer(data, dtype=torch.uint8)
    mine = mine.to(on)
    chunks = [torch.empty(longest, dtype=torch.uint8, device=on) for _ in sizes]
    dist.all_gather(chunks, mine)
    out = []
    for chunk, n in zip(chunks, sizes, strict=True):
        chunk = chunk.cpu().contiguous()
        raw = ctypes.string_at(chunk.data_ptr(), int(n.item()))
        out.append(torch.load(io.BytesIO(raw), weights_only=False))
    return out


def _device(device: str, local_rank: int) -> torch.device:
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")
