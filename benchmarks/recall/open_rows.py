"""The open table: reports of the last twelve months (Dec 2025 - Dec 2026)
in the five areas that are still open upstream, or were fixed only after
2.13, and that a torch-only CPU script reproduces (``open/<id>.py``).

Unlike a row of ``rows_*.py`` nothing is patched in: each script runs
against the installed torch and says whether the bug shows there (exit 1,
"REPRODUCED: ...") or not (exit 0, "NOT REPRODUCED: ..."); exit 2 is a
script that could not run its scenario. The candidates that no script
reproduces, and why, are listed in ``survey_open.md``.

The suite's verdict on an open bug is read from its catalog of known bugs
(``pytest_fsdpcheck/impls/torch_bugs.py``), not from a run: *flagged* where
the row names a known bug whose range holds the installed release, else
*missed*. Nothing here claims a detection that was not checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

OPEN_DIR = Path(__file__).resolve().parent / "open"

#: the five areas of the suite (a row of the open table names one)
OPEN_AREAS = ("traversal", "annotation", "splitting", "exec_order", "fsdp2")


@dataclass(frozen=True)
class OpenBug:
    #: the script's stem, ``<area prefix>-<what>``: ``open/<id>.py``
    id: str
    #: one of :data:`OPEN_AREAS`
    area: str
    #: the behaviour as a user meets it, in a sentence or two
    behaviour: str
    #: the reports and pull requests, ``"owner/repo#NNN"``, the report first
    upstream: tuple[str, ...]
    #: the report's state when surveyed, with its date
    status: str
    #: the releases the reports name (``()`` where they name none)
    releases_named: tuple[str, ...] = ()
    #: the suite's invariants the behaviour breaks (DESIGN.md)
    invariants: tuple[str, ...] = ()
    #: the suite's known bug that models it (``impls/torch_bugs.py``), if any
    known: str | None = None
    #: the script run on releases other than the installed one, by hand:
    #: ``(release, "reproduced" | "not reproduced")``
    measured: tuple[tuple[str, str], ...] = ()

    @property
    def script(self) -> Path:
        return OPEN_DIR / f"{self.id}.py"


OPEN_ROWS: tuple[OpenBug, ...] = (
    OpenBug(
        id="spl-split-float-output",
        area="splitting",
        behaviour="torch.compile of a DDP model whose stochastic-depth probability is a float module attribute "
        "(recompiled, so symbolic): DDPOptimizer's split passes the float between buckets as a partition output "
        "and the bucket compile raises AttributeError: 'float' object has no attribute 'meta' (fine with "
        "optimize_ddp=False).",
        upstream=("pytorch/pytorch#196227", "pytorch/pytorch#197420"),
        status="open (opened 2026-09-07; fix PR open)",
        invariants=("SPL-16",),
        measured=(("2.12.1", "reproduced"), ("2.15.0", "reproduced")),
        # found by SPL-16's third model through AOTAutograd (float-scaled residual blocks, a graph break between)
        known="spl-float-partition-output",
    ),
    OpenBug(
        id="ann-fsdp-int-attr-symbolic",
        area="annotation",
        behaviour="Under torch.compile(dynamic=True) an int attribute of an FSDP-managed module (skip_fsdp_guards, "
        "the default) is lifted as a SymInt graph input, where a plain module's is a constant.",
        upstream=("pytorch/pytorch#194795",),
        status="open PR (2026-08-25); no separate issue found",
        invariants=("ANN-8",),
        measured=(("2.12.1", "reproduced"), ("2.15.0", "reproduced")),
        # found by ANN-8 (the same module compiled with dynamic=True, annotated and plain)
        known="ann-fsdp-int-attr-symbolic",
    ),
    OpenBug(
        id="fs2-inplace-view-output",
        area="fsdp2",
        behaviour="An in-place op on a view returned by a fully_shard module drops its pre-backward hook: backward "
        "never all-gathers its parameters and reads freed storage (\"setStorage: ... storage of size 0\").",
        upstream=("pytorch/pytorch#181832", "pytorch/pytorch#181850"),
        status="closed by a warning-only PR (2026-05-05); the behaviour remains",
        invariants=("FS2-14",),
        measured=(("2.12.1", "reproduced"), ("2.15.0", "reproduced")),
        # found by FS2-14's residual block (a returned view written into in place), resharded case
        known="fs2-inplace-view-hook-dropped",
    ),
    OpenBug(
        id="fs2-unused-params-graphs-differ",
        area="fsdp2",
        behaviour="With set_reduce_scatter_unused_params(True), a group whose output feeds the loss on one rank only "
        "is reduced at another point of backward on each rank: the reduce-scatters pair up crosswise and every "
        "gradient is wrong (gloo aborts where the sizes differ).",
        upstream=("pytorch/pytorch#158719", "pytorch/torchtitan#2747", "pytorch/pytorch#174862"),
        status="open (opened 2025-07-20, active 2026-03..06; fix PR open)",
        releases_named=("2.6",),
        invariants=("FS2-9",),
        measured=(("2.15.0", "reproduced"),),
        # found by FS2-9's per-rank batches on a user's plan of this shape (tests.planted.plans:aux_head)
        known="fs2-unused-params-graphs-differ",
    ),
    OpenBug(
        id="fs2-tp-partial-grad-reduce-dtype",
        area="fsdp2",
        behaviour="On a (dp, tp) mesh with reduce_dtype=fp32, the TP Partial -> Replicate all-reduce of a "
        "replicated (SequenceParallel) parameter's gradient runs in the bf16 compute dtype.",
        upstream=("pytorch/pytorch#190626", "pytorch/pytorch#190627"),
        status="open (2026-07); fix PR open; 2.15.0 reduces in fp32",
        invariants=("FS2-15",),
        measured=(("2.12.1", "reproduced"), ("2.15.0", "not reproduced")),
        # found by FS2-15's tensor-parallel step on a (dp, tp) mesh, bf16 parameters reduced in fp32
        known="fs2-tp-reduce-in-compute-dtype",
    ),
    OpenBug(
        id="fs2-frozen-first-forward-mp",
        area="fsdp2",
        behaviour="A group whose parameters are all frozen at its first forward latches None as its mixed-precision "
        "dtypes; once unfrozen, its first backward raises a gradient-dtype error (or reduces in bf16).",
        upstream=("pytorch/pytorch#186998", "pytorch/pytorch#187376"),
        status="closed 2026-06 by PR 187376: 2.13.0 has the bug, 2.15.0 not",
        invariants=("FS2-9",),
        known="fs2-frozen-mp-latched",
        measured=(("2.12.1", "reproduced"), ("2.15.0", "not reproduced")),
    ),
    OpenBug(
        id="fs2-grouped-modules-reused",
        area="fsdp2",
        behaviour="A module of a grouped fully_shard([a, b]) called again after the group's forward ended: with a "
        "bf16 policy its input stays fp32 and the call raises; in fp32, after a first forward with the group "
        "frozen, one gradient is off and the other missing (the catalog's shape for this report; reported on "
        "2.12.0a0 as a setStorage error).",
        upstream=("pytorch/pytorch#183702", "pytorch/pytorch#180428"),
        status="open (comment 2026-05-18); fixed in 2.13.0 (PR 180428, merged 2026-04): only 2.12.1 shows it",
        releases_named=("2.12.0a0",),
        invariants=("FS2-9",),
        known="fs2-grouped-module-reused",
        measured=(("2.12.1", "reproduced"), ("2.15.0", "not reproduced")),
    ),
    OpenBug(
        id="fs2-shared-module-two-groups",
        area="fsdp2",
        behaviour="fully_shard(a); fully_shard(b) with a submodule shared by a and b fails inside the DTensor code "
        "(TypeError \"Invariant encountered\") instead of the ValueError naming the shared parameter that "
        "fully_shard raises since PR 179532 (only at the first forward).",
        upstream=("pytorch/torchtitan#2817", "pytorch/pytorch#179532"),
        status="open (2026-04-03); the detection PR merged, this shape still fails first",
        releases_named=("2.10",),
        invariants=("FS2-8",),
        known="fs2-group-conflict-not-rejected",
        measured=(("2.12.1", "reproduced"), ("2.15.0", "reproduced")),
    ),
)


def open_rows() -> tuple[OpenBug, ...]:
    ids = [row.id for row in OPEN_ROWS]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise ValueError(f"open rows named twice: {', '.join(duplicated)}")
    return OPEN_ROWS
