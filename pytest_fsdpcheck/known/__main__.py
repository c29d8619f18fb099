"""``python -m pytest_fsdpcheck.known [list | show ID | run [ID ...]]``

``list`` (the default) prints the known bugs of the ``torch`` implementation
with their invariants, measured ranges and whether the installed torch is in
range; ``show ID`` prints a bug's reason and its torch-only reproducer, ready
to paste into an upstream issue; ``run`` runs reproducers against the
installed torch (exit 1 while a bug is present, 0 when fixed, 2 when this
torch lacks the API) and prints one line each.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.resources import files

from .torch_bugs import TORCH_BUGS


def reproducer_path(bug):
    return files("pytest_fsdpcheck.known") / "reproducers" / bug.reproducer


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
    args = parser.parse_args(argv)
    by_id = {b.id: b for b in TORCH_BUGS}
    wanted = [args.id] if args.command == "show" else getattr(args, "ids", None) or []
    unknown = [i for i in wanted if i not in by_id]
    if unknown:
        print(f"unknown known-bug id(s) {', '.join(unknown)}; see `python -m pytest_fsdpcheck.known list`", file=sys.stderr)
        return 2
    if args.command == "show":
        bug = by_id[args.id]
        print(f"# {bug.id} ({', '.join(bug.invariants)}); affects torch {bug.affects or 'every version'}, seen {bug.seen_range}")
        print(f"# {bug.reason}\n")
        print(reproducer_path(bug).read_text(encoding="utf-8"), end="")
        return 0
    if args.command == "run":
        worst = 0
        for bug in [by_id[i] for i in wanted] or TORCH_BUGS:
            done = subprocess.run([sys.executable, str(reproducer_path(bug))], capture_output=True, text=True, timeout=300)
            line = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or ["(no output)"])[-1]
            print(f"{bug.id:<40} exit {done.returncode}: {line}")
            worst = max(worst, 1 if done.returncode == 1 else 0)
        return worst
    torch_version = _installed_torch()
    for bug in TORCH_BUGS:
        active = "" if torch_version is None else (" (active)" if bug.applies_to_version(torch_version) else " (not active)")
        print(f"{bug.id:<40} {','.join(bug.invariants):<12} torch {bug.affects or 'any':<7} seen {bug.seen_range}{active}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
