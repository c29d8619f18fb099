"""``python -m pytest_fsdpcheck.known [list | show ID | run [ID ...] | exposure --model PKG:FACTORY]``

``list`` (the default) prints the known bugs of the ``torch`` implementation
with their invariants, measured ranges, whether the installed torch is in
range and the upstream issue or PR each cites (or "not reported upstream");
``show ID`` prints a bug's upstream links, reason and its torch-only
reproducer, ready to paste into an upstream issue; ``run`` runs reproducers against the
installed torch (exit 1 while a bug is present, 0 when fixed, 2 when this
torch lacks the API, 3 when the script crashed: an exception escaping it, a
renamed function say, is never read as "present" nor as "lacks the API";
``run`` itself exits 3 if any crashed, else 1 if any bug is present) and
prints one line each; ``exposure`` replays a
model through each known bug's reference switches and prints which bugs
change its bucket plan, traversal, FSDP2 groups or exec order, and on which
releases (:mod:`.exposure`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.resources import files

from ..core.bugs import upstream_url
from ..impls.torch_bugs import TORCH_BUGS


def reproducer_path(bug):
    return files("pytest_fsdpcheck.known") / "reproducers" / bug.reproducer


#: a reproducer's own exit codes, and the one ``run`` gives a crash
PRESENT, LACKS_API, CRASHED = 1, 2, 3
_STATUS = {0: "fixed", PRESENT: "present", LACKS_API: "torch lacks the API", CRASHED: "crashed"}

# An uncaught exception exits 1, as "bug present" does: run the script under
# a guard that gives an escaping exception its own code. SystemExit passes.
_GUARD = (
    "import runpy, sys, traceback\n"
    "sys.argv = sys.argv[1:]\n"
    "try:\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "except SystemExit:\n"
    "    raise\n"
    "except BaseException:\n"
    "    traceback.print_exc()\n"
    f"    sys.exit({CRASHED})\n"
)


def run_reproducer(path, timeout=300) -> subprocess.CompletedProcess:
    """Run a reproducer script; a crash exits ``CRASHED``."""
    return subprocess.run([sys.executable, "-c", _GUARD, str(path)], capture_output=True, text=True, timeout=timeout)


def upstream_line(bug) -> str:
    """Where the bug stands upstream: its issue/PR links, or that none is known."""
    if not bug.upstream:
        return "upstream: not reported upstream (file it with the reproducer below)"
    return "upstream: " + ", ".join(f"{ref} <{upstream_url(ref)}>" for ref in bug.upstream)


def _installed_torch() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_fsdpcheck.known", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("list", help="list the known torch bugs")
    show = sub.add_parser("show", help="print a bug's reason and reproducer")
    show.add_argument("id")
    run = sub.add_parser("run", help="run reproducers against the installed torch")
    run.add_argument("ids", nargs="*", help="bug ids (default: all)")
    exposed = sub.add_parser("exposure", help="which known bugs change a model's outcome, on which releases")
    exposed.add_argument("--model", action="append", required=True, metavar="PKG.MODULE:FACTORY",
                         help="a model factory or installed model name (repeatable)")
    exposed.add_argument("--json", metavar="FILE", help="also write the exposures as JSON")
    args = parser.parse_args(argv)
    if args.command == "exposure":
        from ..cases.exposure import main as exposure_main

        return exposure_main(args.model, args.json)
    by_id = {b.id: b for b in TORCH_BUGS}
    wanted = [args.id] if args.command == "show" else getattr(args, "ids", None) or []
    unknown = [i for i in wanted if i not in by_id]
    if unknown:
        print(f"unknown known-bug id(s) {', '.join(unknown)}; see `python -m pytest_fsdpcheck.known list`", file=sys.stderr)
        return 2
    if args.command == "show":
        bug = by_id[args.id]
        print(f"# {bug.id} ({', '.join(bug.invariants)}); affects torch {bug.affects or 'every version'}, seen {bug.seen_range}")
        print(f"# {upstream_line(bug)}")
        print(f"# {bug.reason}\n")
        print(reproducer_path(bug).read_text(encoding="utf-8"), end="")
        return 0
    if args.command == "run":
        codes = set()
        for bug in [by_id[i] for i in wanted] or TORCH_BUGS:
            done = run_reproducer(reproducer_path(bug))
            code = done.returncode if done.returncode in _STATUS else CRASHED
            streams = (done.stderr, done.stdout) if code == CRASHED else (done.stdout, done.stderr)
            line = next((s.strip().splitlines()[-1] for s in streams if s.strip()), "(no output)")
            print(f"{bug.id:<40} exit {done.returncode} ({_STATUS[code]}): {line}")
            codes.add(code)
        return CRASHED if CRASHED in codes else PRESENT if PRESENT in codes else 0
    from ..core.provided import RELEASES
    from ..known import observed

    torch_version = _installed_torch()
    record = observed.load()
    for bug in TORCH_BUGS:
        active = "" if torch_version is None else (" (active)" if bug.applies_to_version(torch_version) else " (not active)")
        cited = ", ".join(bug.upstream) or "not reported upstream"
        never, not_run = observed.gaps(bug, record, RELEASES)
        marks = (f"  NEVER OBSERVED on {', '.join(never)}" if never else "") + \
            (f"  (not run on {', '.join(not_run)})" if not_run else "")
        print(f"{bug.id:<40} {','.join(bug.invariants):<12} torch {bug.affects or 'any':<7} seen {bug.seen_range}{active}"
              f"  [{cited}]{marks}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
