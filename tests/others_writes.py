"""A pytest plugin for the project's inner runs (``-p tests.others_writes``):
it records the paths in the run's folder that code other than
pytest-fsdpcheck and the code under test creates, so that a test checking
that nothing is left behind judges only what the plugin wrote.

Framework CI images carry other plugins that write in the folder as a run
starts (pytest-benchmark's ``.benchmarks``). An audit hook sees every
Python-level open for writing, mkdir, rename and link; a path is another's
when, as it is created, no frame of the plugin, the suite or the folder's
own modules is on the stack. Anything the plugin does write, even through
a library it calls, keeps one of those frames and still counts.

Each process of the run (xdist workers too) appends the top-level names it
saw to the file named by ``OTHERS_WRITES_LOG``, kept outside the folder.
"""

import os
import sys

_LOG = os.environ.get("OTHERS_WRITES_LOG")
_FOLDER = os.path.realpath(os.getcwd())
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _created(event: str, args: tuple) -> object:
    if event == "open":
        path, mode, flags = args
        writes = (mode is not None and any(c in str(mode) for c in "wax+")) or (mode is None and flags & _WRITE_FLAGS)
        return path if writes else None
    if event in ("os.mkdir", "os.symlink", "os.link"):
        return args[1] if event != "os.mkdir" else args[0]
    if event in ("os.rename", "os.replace", "shutil.copyfile", "shutil.copytree"):
        return args[1]
    return None


def created_name(event: str, args: tuple, folder: str) -> str | None:
    """The top-level name in ``folder`` that this audit event creates, if any."""
    if not event.startswith(("open", "os.", "shutil.")):
        return None
    path = _created(event, args)
    if not isinstance(path, (str, bytes, os.PathLike)):
        return None
    path = os.path.realpath(os.fsdecode(path))
    if not path.startswith(folder + os.sep):
        return None
    return os.path.relpath(path, folder).split(os.sep)[0]


def by_others(ours: tuple[str, ...]) -> bool:
    """Whether no frame on the stack is from the files under ``ours``."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.startswith(ours):
            return False
        frame = frame.f_back
    return True


def ours_in(folder: str) -> tuple[str, ...]:
    """The plugin's, the suite's and ``folder``'s own files."""
    import pytest_fsdpcheck
    from pytest_fsdpcheck.plugin.collection import conformance_dir

    return (os.path.dirname(os.path.realpath(pytest_fsdpcheck.__file__)) + os.sep,
            os.path.realpath(conformance_dir()) + os.sep, folder + os.sep)


def _hook(event, args):
    if _LOG is None:
        return
    name = created_name(event, args, _FOLDER)
    if name is None or name in _seen or not by_others(_ours_prefixes()):
        return
    _seen.add(name)
    with open(_LOG, "a") as log:  # outside the folder: not seen by this hook
        log.write(name + "\n")


_seen: set[str] = set()
_prefixes: list = []


def _ours_prefixes() -> tuple[str, ...]:
    if not _prefixes:
        _prefixes.append(ours_in(_FOLDER))
    return _prefixes[0]


if _LOG is not None:  # imported for its functions alone (tests/helpers.py) it watches nothing
    sys.addaudithook(_hook)
