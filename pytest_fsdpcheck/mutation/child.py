"""One mutant's test process: ``python -m pytest_fsdpcheck.mutation.child
MODULE=PATH ... -- PYTEST_ARGS``.

Cosmic Ray mutates copies of torch's files (the overlay, the working
directory of this process); this process makes ``import`` load each listed
torch module from its copy, so the installed torch is never written, then
runs pytest. The last line it prints says where the modules came from and
pytest's exit status, so a harness error is never read as a killed mutant.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import threading
import time

MARKER = "fsdpcheck-mutation:"
# kept before pytest starts: the suite's isolation intercepts os._exit
# during tests (an implementation must not end the run), the watchdog's too
_HARD_EXIT = os._exit


class OverlayFinder(importlib.abc.MetaPathFinder):
    """Loads the named modules from their overlay copies."""

    def __init__(self, files: dict[str, str]):
        self.files = files
        self.loaded: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        file = self.files.get(fullname)
        if file is None:
            return None
        self.loaded.add(fullname)
        return importlib.util.spec_from_file_location(fullname, file)


#: the pid of the process that starts the test processes (the run, or an
#: HTTP worker), set in its environment before it starts any
PARENT = "FSDPCHECK_MUTATION_PARENT"


def _exit_with_parent() -> None:
    # Cosmic Ray starts this process in a session of its own: if the run is
    # killed, nothing else would stop it. The parent's pid comes from its
    # environment: killed before this process got here, it is already gone.
    parent = int(os.environ.get(PARENT, os.getppid()))

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        _HARD_EXIT(70)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str]) -> int:
    split = argv.index("--")
    overlay = os.getcwd()
    files = {}
    for pair in argv[:split]:
        module, _, path = pair.partition("=")
        files[module] = os.path.join(overlay, path)
    # `python -m` put the overlay folder first on sys.path; its partial
    # `torch/` folder must never stand for a package
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != overlay]
    already = sorted(name for name in files if name in sys.modules)
    if already:
        print(f"{MARKER} harness error: imported before the overlay: {', '.join(already)}")
        return 3
    _exit_with_parent()
    # Cosmic Ray keeps only stdout: a usage error pytest prints to stderr
    # would be lost from the mutant's record
    os.dup2(1, 2)
    finder = OverlayFinder(files)
    sys.meta_path.insert(0, finder)
    import pytest

    start = time.monotonic()
    status = int(pytest.main(argv[split + 1:]))
    # a module that failed to import (the mutant broke it) is absent, not wrong
    wrong = sorted(name for name in finder.loaded
                   if name in sys.modules and getattr(sys.modules[name], "__file__", None) != files[name])
    if wrong:
        print(f"{MARKER} harness error: not loaded from the overlay: {', '.join(wrong)}")
        return 3
    print(f"{MARKER} pytest exit {status} in {time.monotonic() - start:.1f} s; "
          f"from the overlay: {', '.join(sorted(finder.loaded)) or 'none imported'}")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
