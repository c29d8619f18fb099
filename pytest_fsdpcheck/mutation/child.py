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
import importlib.machinery
import importlib.util
import os
import sys
import threading
import time

MARKER = "fsdpcheck-mutation:"
# kept before pytest starts: the suite's isolation intercepts os._exit
# during tests (an implementation must not end the run), the watchdog's too
_HARD_EXIT = os._exit


class SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles an overlay copy from its source at every import, never
    through a bytecode cache: two mutants of one file may have the same size
    and modification second, which is all a cached ``.pyc`` is checked by,
    so a cache written for one mutant would run in place of the next."""

    def get_code(self, fullname):
        return self.source_to_code(self.get_data(self.path), self.path)


class OverlayFinder(importlib.abc.MetaPathFinder):
    """Loads the named modules from their overlay copies (compiled from source)."""

    def __init__(self, files: dict[str, str]):
        self.files = files
        self.loaded: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        file = self.files.get(fullname)
        if file is None:
            return None
        self.loaded.add(fullname)
        return importlib.util.spec_from_file_location(fullname, file, loader=SourceOnlyLoader(fullname, file))


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


#: the environment variable that carries ``{module: copy}`` to subprocesses
SUBPROCESS_FILES = "FSDPCHECK_MUTATION_FILES"
_SITE = """\
# written by pytest_fsdpcheck.mutation.child: the checks' own subprocesses
# (the ranks of SPL-16 and FS2-9) import the mutant too, not the installed torch
import json, os, sys
from pytest_fsdpcheck.mutation.child import OverlayFinder, SUBPROCESS_FILES
if os.environ.get(SUBPROCESS_FILES):
    sys.meta_path.insert(0, OverlayFinder(json.loads(os.environ[SUBPROCESS_FILES])))
"""


def _overlay_in_subprocesses(overlay: str, files: dict[str, str]) -> None:
    """Every Python process the checks start imports the listed modules from
    their copies as well: a ``sitecustomize`` on their ``PYTHONPATH`` (neither
    the environment nor Python ships one here; one already importable would
    be shadowed, so it is refused)."""
    import importlib.util
    import json

    if importlib.util.find_spec("sitecustomize") is not None:
        raise SystemExit(f"{MARKER} harness error: a sitecustomize module exists; the overlay cannot reach subprocesses")
    site = os.path.join(overlay, ".fsdpcheck-site")
    os.makedirs(site, exist_ok=True)
    with open(os.path.join(site, "sitecustomize.py"), "w", encoding="utf-8") as out:
        out.write(_SITE)
    os.environ[SUBPROCESS_FILES] = json.dumps(files)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))


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
    _overlay_in_subprocesses(overlay, files)
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
