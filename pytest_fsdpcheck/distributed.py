"""The distributed checks (SPL-16, FS2-9) at torchrun's scale.

    torchrun --nnodes N --nproc-per-node G -m pytest_fsdpcheck.distributed [pytest args]

Every process torchrun starts is one rank: it joins the process group from
torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``/``MASTER_PORT`` from the rendezvous; NCCL on CUDA, gloo on
CPU) and runs the suite's ``test_distributed.py`` with the given pytest
arguments, and where the run names a users' model (``--fsdpcheck-model``)
that model's FS2-9 (:func:`users_models_plugin`). The checks then use
these ranks instead of spawning their own,
and every rank receives every rank's results, so all ranks reach the same
verdict. Rank 0 reports (it alone writes the report, HTML, JUnit and
baseline files); the other ranks' standard output is discarded
(their standard error is kept for crashes). The exit status of every rank
is the worst of all ranks (:func:`worst_status`: by the plugin's precedence,
a FAIL before a case error before an environment ERROR before strict
findings, pytest's own statuses above all), so torchrun fails when any rank
failed, with the status that says whose fault. A rendezvous or process
group that cannot start is the environment's status.
"""

from __future__ import annotations

import os
import sys

USAGE = "usage: torchrun --nnodes N --nproc-per-node G -m pytest_fsdpcheck.distributed [pytest args]"
ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
#: seconds a collective may wait for a peer before it fails (a dead rank
#: must not hang the others; torchrun's agent also stops them)
COLLECTIVE_TIMEOUT_S = float(os.environ.get("FSDPCHECK_COLLECTIVE_TIMEOUT", "300"))
#: pytest's and its plugins' options that write a file: one of each, from rank 0
_PYTEST_WRITES = ("--junitxml", "--junit-xml", "--resultlog", "--report-log", "--html")


def rank_args(argv: list[str], rank: int) -> list[str]:
    """The pytest arguments rank ``rank`` runs with: a rank other than 0
    drops every option that writes a file (the suite's report, HTML, JUnit
    and baseline, pytest's JUnit), so no two ranks write the same path."""
    if rank == 0:
        return list(argv)
    from .plugin.options import WRITTEN_BY

    return _without(argv, (*WRITTEN_BY, *_PYTEST_WRITES))


def _requested_device(argv: list[str]) -> str | None:
    """``--fsdpcheck-device`` as given (cpu or cuda); None for auto or unset:
    a rank runs on one device, chosen by :func:`~.runs.world.choose_device`."""
    for i, arg in enumerate(argv):
        value = None
        if arg.startswith("--fsdpcheck-device="):
            value = arg.split("=", 1)[1]
        elif arg == "--fsdpcheck-device" and i + 1 < len(argv):
            value = argv[i + 1]
        if value in ("cpu", "cuda"):
            return value
    return None


def _without(argv: list[str], options) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in options:
            skip = "=" not in arg
            continue
        out.append(arg)
    return out


def users_models_plugin():
    """A pytest plugin putting users' models at torchrun's world: where the
    run names a model (``--fsdpcheck-model`` or the ini file's
    ``fsdpcheck_model``), their FS2-9 (``test_model_plan_end_to_end``: the
    plan's real ``fully_shard`` calls, one step eagerly and compiled,
    beside the unsharded model) runs beside ``test_distributed.py`` on
    torchrun's ranks, not on ranks of its own. The test is added once the
    suite's session has read its models: named without one, pytest would
    collect it with an empty parameter set."""
    import pytest

    from .plugin.collection import conformance_dir
    from .plugin.session import get_session

    class UsersModels:
        @pytest.hookimpl(trylast=True)
        def pytest_configure(self, config):
            session = get_session(config)
            if session is not None and session.models:
                config.args.append(f"{conformance_dir() / 'test_models.py'}::test_model_plan_end_to_end")

    return UsersModels()


def worst_status(codes) -> int:
    """The status the ranks' ``codes`` exit with: pytest's own statuses
    other than 0 and 1 (interrupted, internal, usage error...) the highest
    first, then the plugin's precedence (``report.EXIT_PRECEDENCE``)."""
    from .report.verdict import EXIT_PRECEDENCE

    def severity(code: int) -> int:
        ours = EXIT_PRECEDENCE[::-1]  # 0 least, a FAIL most
        return ours.index(code) if code in ours else len(ours) + code

    return max(codes, key=severity)


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0].strip() if lines else ''}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    missing = [name for name in ENV if name not in os.environ]
    if missing:
        print(f"pytest_fsdpcheck.distributed: {', '.join(missing)} not set: start it with torchrun\n{USAGE}", file=sys.stderr)
        return 4
    from datetime import timedelta

    import pytest
    import torch
    import torch.distributed as dist

    from .plugin.collection import conformance_dir
    from .report.verdict import EXIT_ENVIRONMENT
    from .runs.launch import TORCHRUN_ENV
    from .runs.world import (
        choose_device,
        exchange_places,
        here,
        shared_gpus,
        visible_gpus,
        world_record,
    )

    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    requested = _requested_device(argv)
    gpus = visible_gpus()
    cuda = gpus > 0
    timeout = timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    try:
        # the rendezvous store exists before any backend: the device is
        # chosen on it, so no rank joins NCCL on a GPU another rank holds
        store, _, _ = next(dist.rendezvous("env://", rank, world_size, timeout=timeout))
        choice = exchange_places(
            store, here(rank, local_rank, gpus), world_size,
            lambda places: choose_device(requested, cuda, shared_gpus(places)), COLLECTIVE_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - the world failed, not a check: one line naming it
        print(f"pytest_fsdpcheck.distributed: environment (rank {rank} of {world_size}, "
              f"MASTER_ADDR {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}): the rendezvous failed: "
              f"{_first_line(exc)}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    if choice.stop:
        print(f"pytest_fsdpcheck.distributed: {choice.stop}", file=sys.stderr)
        return 4
    if choice.note and rank == 0:
        print(f"pytest_fsdpcheck.distributed: {choice.note}", file=sys.stderr)
    device = choice.device
    try:
        if device == "cuda":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(choice.backend, store=dist.PrefixStore("default_pg", store), rank=rank,
                                world_size=world_size, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - the world failed, not a check: one line naming it
        from .checks.distributed import describe_world

        print(f"pytest_fsdpcheck.distributed: environment ({describe_world([{'world': world_record(choice.backend, device, world_size)}])}): "
              f"rank {rank} could not join the process group: {_first_line(exc)}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    os.environ[TORCHRUN_ENV] = "1"
    args = [
        "--fsdpcheck", "-p", "no:randomly", "-p", "no:xdist", "-p", "no:cacheprovider",
        "--fsdpcheck-device", device, str(conformance_dir() / "test_distributed.py"),
        *_without(argv, ("--fsdpcheck-device",)),
    ]
    args = rank_args(args, rank)
    if rank != 0:
        sys.stdout.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
    code = 3  # pytest's "internal error" unless pytest says otherwise
    try:
        code = int(pytest.main(args, plugins=[users_models_plugin()]))
    finally:
        mine = torch.tensor([code], device=torch.device("cuda", local_rank) if device == "cuda" else "cpu")
        every = [torch.zeros_like(mine) for _ in range(world_size)]
        try:
            dist.all_gather(every, mine)
            code = worst_status(int(c.item()) for c in every)
        finally:
            dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
