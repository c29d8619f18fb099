"""Reading a suite run's terminal output back: the long failure section of
each failed test, keyed by its test id."""

from __future__ import annotations

import re

_HEADER = re.compile(r"^_+ (\S.*?) _+$")


def failure_sections(lines: list[str]) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in lines:
        match = _HEADER.match(line)
        if match:
            current = match.group(1)
            sections[current] = []
        elif line.startswith("=") and current is not None:
            current = None  # the summary/matrix sections that follow
        elif current is not None:
            sections[current].append(line)
    return {name: "\n".join(body) for name, body in sections.items()}


def selection(planted: dict, control: str = "reference") -> str:
    """One -k expression running, per implementation, only the tests it needs,
    and all of those tests for ``control`` (which must pass them).

    -k matches substrings of test ids, so the implementation's class name
    (after the colon) selects its parametrizations.
    """
    parts = [f"({spec.rpartition(':')[2]} and ({k}))" for spec, (_, k) in planted.items()]
    everything = " or ".join(f"({k})" for k in dict.fromkeys(k for _, k in planted.values()))
    # "[reference" matches its parametrizations, not test_matches_reference.
    parts.append(f"([{control} and ({everything}))")
    return " or ".join(parts)


def invariant_tests(area: str | tuple[str, ...], invariant: str) -> str:
    """A -k expression selecting the tests of conformance module ``area``
    (or of each module of a tuple: an area whose tests span several)
    marked with ``invariant`` (so a planted run spends nothing on the rest)."""
    import importlib

    names = []
    for module_name in (area,) if isinstance(area, str) else area:
        module = importlib.import_module(f"pytest_fsdpcheck.conformance.{module_name}")
        names += [name for name, fn in vars(module).items() if name.startswith("test_") and any(
            mark.name == "invariant" and invariant in mark.args for mark in getattr(fn, "pytestmark", []))]
    assert names, f"no test of {area} is marked {invariant}"
    return " or ".join(names)


def control_problems(report, control: str = "reference") -> list[str]:
    """The control implementation's cells that are not a pass."""
    cells = report["matrix"].get(control, {})
    if not cells:
        return [f"{control} ran no tests"]
    return [f"{control}: {inv} is {cell['outcome']!r}" for inv, cell in cells.items() if cell["outcome"] != "pass"]


#: extra arguments for planted-bug runs: no shrink phase (tests/planted/noshrink.py
#: says why), and Python's own tracebacks. What these runs are judged on is
#: each cell and the failure's text naming the ID, which every style prints;
#: pytest's long style parses each kept frame's whole module again for every
#: failure, about a seventh of the kill tier's time where a run fails
#: hundreds of times (the kill tier alone: 343 s -> 295 s on 2 cores).
PLANTED_RUN = ("-p", "tests.planted.noshrink", "--tb=native")


def printed_reproducers(lines) -> list[str]:
    """The snippets in the 'fsdpcheck reproducer' sections of a run's output,
    exactly as a user would copy them."""
    snippets, body = [], None
    for line in lines:
        if "fsdpcheck reproducer" in line and line.startswith("-"):
            body = []
            continue
        if body is not None:
            if line.startswith(("===", "___", "---")):
                snippets.append("\n".join(body).strip() + "\n")
                body = None
            else:
                body.append(line)
    if body:
        snippets.append("\n".join(body).strip() + "\n")
    return snippets


class OthersWrites:
    """For an inner pytest run in a folder: ``args`` load
    tests/others_writes.py (from a folder of its own, ``pythonpath``, so a
    run that must import the plugin from a wheel still does), and
    ``names()`` gives the top-level names that other code than the plugin
    created there. HOME moves to a folder of its own, so what CUDA and other
    libraries keep per user (``~/.nv``, ``~/.cache``) is not written in the
    run's folder either. Set through ``monkeypatch`` for runs that inherit
    the environment."""

    def __init__(self, monkeypatch, outside):
        import os
        import pathlib
        import shutil

        outside = pathlib.Path(outside)
        for folder in ("home", "plugins"):
            (outside / folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(pathlib.Path(__file__).with_name("others_writes.py"), outside / "plugins")
        self.log = outside / "others-writes.txt"
        self.log.write_text("")
        self.pythonpath = str(outside / "plugins")
        self.args = ["-p", "others_writes"]
        monkeypatch.setenv("HOME", str(outside / "home"))
        monkeypatch.setenv("OTHERS_WRITES_LOG", str(self.log))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([self.pythonpath, os.environ.get("PYTHONPATH", "")]))

    def names(self) -> set[str]:
        return set(self.log.read_text().split())


class OthersWritesHere:
    """:class:`OthersWrites` for an inner pytest run in this process
    (``pytester.runpytest_inprocess``): within ``with watch(folder):``,
    ``names`` collects the top-level names in ``folder`` that code other
    than the plugin, the suite and the folder's own modules created (the
    same rule as tests/others_writes.py). An audit hook cannot be removed:
    one per process serves every watch, and does nothing outside one."""

    _watching: list = []  # at most one (folder, names) at a time
    _hooked = False

    def __init__(self):
        self.names: set[str] = set()

    def watch(self, folder):
        import contextlib
        import os
        import sys

        from tests.others_writes import ours_in

        folder = os.path.realpath(folder)
        if not OthersWritesHere._hooked:
            sys.addaudithook(OthersWritesHere._hook)
            OthersWritesHere._hooked = True

        @contextlib.contextmanager
        def watching():
            watch = (folder, ours_in(folder), self.names)
            OthersWritesHere._watching.append(watch)
            try:
                yield self
            finally:
                OthersWritesHere._watching.remove(watch)

        return watching()

    @staticmethod
    def _hook(event, args):
        if not OthersWritesHere._watching:
            return
        from tests.others_writes import by_others, created_name

        folder, ours, names = OthersWritesHere._watching[-1]
        name = created_name(event, args, folder)
        if name is not None and by_others(ours):
            names.add(name)


def spl16_on_this_torch() -> str:
    """SPL-16's cell for a plan that is right (torch's own, the reference's,
    or any that declares Dynamo's runtime bugs): ``known`` where torch's
    compile of DDP fails on the float-scaled blocks
    (``spl-float-partition-output``: SPL-16's world fails it whatever the
    plan), else ``pass``."""
    import torch

    from pytest_fsdpcheck.impls.torch_bugs import DYNAMO_RUNTIME_BUGS

    (floats,) = [b for b in DYNAMO_RUNTIME_BUGS if b.id == "spl-float-partition-output"]
    return "known" if floats.applies_to_version(torch.__version__) else "pass"


def fs2_9_on_this_torch() -> str:
    """FS2-9's cell for a walk that is right (torch's own, the reference's):
    ``known`` where fully_shard's runtime has fs2-frozen-mp-latched (torch
    2.8 ... 2.13: FS2-9's mixed-precision step fails in every walk's
    column), else ``pass``."""
    import torch

    from pytest_fsdpcheck.impls.torch_bugs import FULLY_SHARD_RUNTIME_BUGS

    (latched,) = [b for b in FULLY_SHARD_RUNTIME_BUGS if b.id == "fs2-frozen-mp-latched"]
    return "known" if latched.applies_to_version(torch.__version__) else "pass"


def fs2_15_on_this_torch() -> str:
    """FS2-15's cell for a walk that is right (torch's own, the reference's):
    ``known`` where fully_shard's runtime sums a tensor-parallel gradient
    over tp in bf16 (``fs2-tp-reduce-in-compute-dtype``), else ``pass``."""
    import torch

    from pytest_fsdpcheck.impls.torch_bugs import FULLY_SHARD_RUNTIME_BUGS

    (tp_sum,) = [b for b in FULLY_SHARD_RUNTIME_BUGS if b.id == "fs2-tp-reduce-in-compute-dtype"]
    return "known" if tp_sum.applies_to_version(torch.__version__) else "pass"
