"""One bug torch really had, as the recall benchmark runs it.

A row is the old behaviour of a released torch put back into the installed
release at run time (nothing installed is written): ``patch`` replaces or
wraps torch's own functions through a :class:`pytest.MonkeyPatch`, in a
fresh process, before the suite imports anything of the area.  The
benchmark checks that the patch really changes something (``witness`` gives
another answer patched than unpatched) and then asks the suite for its
verdict in torch's column.  The suite never sees the row: a row it misses
is killed by a check stated from the spec, never by pasting the old code
into the suite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: the areas a row may belong to: each is judged by its own selection of
#: the suite (``run.AREA_SELECTION``); ``fsdp2_runtime`` and ``ddp_runtime``
#: are the bugs only a real step shows (FS2-9, SPL-16)
AREAS = ("traversal", "annotation", "splitting", "exec_order", "fsdp2", "fsdp2_runtime", "ddp_runtime")


@dataclass(frozen=True)
class RealBug:
    #: a short slug, ``<area prefix>-<what>``, unique in the table
    id: str
    #: one of :data:`AREAS`
    area: str
    #: the old behaviour as a user meets it, in one or two sentences
    behaviour: str
    #: the minor releases whose wheels' source has it, read, e.g. ``"2.0.1"``
    #: or ``"2.4.1 … 2.7.1"`` (latest patch of each minor)
    had: str
    #: the first release read without it (``"not yet"`` while the installed
    #: release still has it)
    fixed_in: str
    #: where the change is written down upstream: ``"pytorch/pytorch#NNN"``
    #: issues or pull requests, or () where none was found (say so in ``note``)
    upstream: tuple[str, ...]
    #: puts the old behaviour back into the installed torch, given a
    #: ``pytest.MonkeyPatch``; ``None`` where the installed release has it
    patch: Callable[[Any], None] | None
    #: a small input's observable answer under the installed torch: it must
    #: differ between patched and unpatched (compared with ``==``)
    witness: Callable[[], Any]
    #: the invariants the suite states the behaviour against (for the table;
    #: the verdict reads every cell of torch's column)
    invariants: tuple[str, ...] = ()
    #: the suite's known bug that models it (``impls/torch_bugs.py``), if any
    known: str | None = None
    #: anything a reader needs: how the range was read, why no upstream
    note: str = ""
