"""``python -m pytest_fsdpcheck.mutation [--area A ...] [--workers N] ...``

Mutates the installed torch's code of each area with Cosmic Ray (its core
operators), restricted to the area's seed functions and what they call in the
same file, and runs only that area's conformance checks on each mutant
(``pytest --fsdpcheck -x -k AREA``, the ``torch`` implementation, the ``ci``
profile). The installed torch is never written: mutants live in copies that
the test process imports in place of torch's files.

Each area's session (a Cosmic Ray sqlite session plus the torch files' hashes)
is kept in ``--session-dir``/<torch version>/<area>: run the command again to
resume after a stop or a kill; ``--fresh`` starts over. ``--workers N`` runs
N Cosmic Ray HTTP workers on this machine. Prints per area: mutants, killed,
survived, timed out, equivalent (with the reason from the triage file), and
the diff of every survivor.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from .areas import AREAS
from .session import AreaSession, MutationError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pytest_fsdpcheck.mutation",
                                     description=__doc__.split("\n\n")[1].replace("\n", " "))
    parser.add_argument("--area", action="append", choices=sorted(AREAS),
                        help="an area to mutate (repeatable; default: all five)")
    parser.add_argument("--session-dir", type=Path, default=Path("fsdpcheck-mutation"),
                        help="where sessions are kept (default: ./fsdpcheck-mutation)")
    parser.add_argument("--workers", type=int, default=1,
                        help="Cosmic Ray HTTP workers on this machine (default 1: sequential, no HTTP)")
    parser.add_argument("--limit", type=int, help="run at most this many pending mutants per area, then stop")
    parser.add_argument("--timeout", type=float,
                        help="seconds one mutant's checks may take (default: 60 + 5 x the unmutated run)")
    parser.add_argument("--checks", help="a -k expression replacing the area's own (a narrower selection)")
    parser.add_argument("--fresh", action="store_true", help="discard the sessions' results and start over")
    parser.add_argument("--retry-errors", action="store_true",
                        help="run again the mutants whose test process failed to report (harness or worker errors)")
    parser.add_argument("--rejudge-survivors", action="store_true",
                        help="run the unmutated checks and then the survivors again, with the checks as they are now "
                             "(after adding a check, case or generator feature); a session judged with a -k "
                             "selection the current one includes is resumed, its kills kept")
    parser.add_argument("--report", action="store_true", help="print the figures of the sessions so far; run nothing")
    parser.add_argument("--triage", help="equivalent-mutant file (default: the one shipped with this package)")
    return parser


def _progress(done, total, result):
    outcome = result.test_outcome.value if result.test_outcome is not None else result.worker_outcome.value
    print(f"  {done}/{total} {outcome}", flush=True)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    # stopped by SIGTERM (or SIGINT where a shell ignores it for background
    # jobs), the run still stops its HTTP workers on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.workers < 1 or (args.limit is not None and args.limit < 0):
        print("error: --workers must be at least 1 and --limit at least 0", file=sys.stderr)
        return 2
    try:
        import cosmic_ray  # noqa: F401
    except ImportError:
        print("error: the mutation command needs Cosmic Ray: pip install 'pytest-fsdpcheck[mutation]'", file=sys.stderr)
        return 2
    from cosmic_ray.work_db import use_db

    from .report import details, figures, table
    from .triage import load

    triage = load(args.triage)
    rows = []
    for name in args.area or list(AREAS):
        try:
            session = AreaSession(args.session_dir / "placeholder", AREAS[name], args.checks)
            session = AreaSession(args.session_dir / session.torch_version / name, AREAS[name], args.checks)
            if args.report:
                state = session.load_state()
                if state is None:
                    print(f"{name}: no session in {session.folder}")
                    continue
            else:
                state = session.open(fresh=args.fresh, widen=args.rejudge_survivors)
                print(f"{name}: torch {session.torch_version}, session {session.folder}", flush=True)
                for note in session.notes:
                    print(f"  note: {note}")
                if args.retry_errors or args.rejudge_survivors:
                    with use_db(str(session.db_path.resolve())) as db:
                        fig = figures(name, db.work_items, dict(db.results), triage)
                    session.forget(fig.error_jobs if args.retry_errors else [])
                    if args.rejudge_survivors:
                        # the checks changed since the baseline: it must pass again before a kill means anything
                        state["baseline"] = None
                        session.forget(fig.survivor_jobs)
                baseline = session.baseline(state)
                timeout = args.timeout or 60 + 5 * baseline["seconds"]
                print(f"  unmutated checks pass in {baseline['seconds']} s; timeout per mutant {timeout:.0f} s; "
                      f"{len(session.pending())} pending", flush=True)
                start = time.monotonic()
                ran = session.execute(state, timeout, args.workers, args.limit, _progress)
                if ran:
                    print(f"  {ran} mutants in {time.monotonic() - start:.0f} s", flush=True)
        except MutationError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            # the mutant in progress is left pending; torch's files were never written
            print(f"interrupted: the {name} session keeps every mutant judged so far; "
                  "the same command resumes it", file=sys.stderr)
            return 130
        with use_db(str(session.db_path.resolve())) as db:
            fig = figures(name, db.work_items, dict(db.results), triage)
        rows.append(fig)
        text = details(fig)
        if text:
            print(text)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
