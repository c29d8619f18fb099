"""What the installed torch can run, for checks that need more than the
function under test (``torch.compile``, Dynamo's graph capture)."""

from __future__ import annotations

import functools


@functools.cache
def compile_unsupported() -> str | None:
    """Why ``torch.compile`` cannot run with this torch and Python, or None.

    torch 2.0 refuses Python 3.11 (``check_if_dynamo_supported``); asking it
    costs nothing, unlike compiling something to find out."""
    import torch

    try:
        from torch._dynamo.eval_frame import check_if_dynamo_supported
    except ImportError:
        return None if hasattr(torch, "compile") else f"torch {torch.__version__} has no torch.compile"
    try:
        check_if_dynamo_supported()
    except Exception as exc:  # noqa: BLE001 - the reason is what torch says
        return f"torch.compile unsupported here: {exc}"
    return None


def require_compile() -> None:
    """Skip the calling check as *not provided* when torch.compile cannot run."""
    reason = compile_unsupported()
    if reason is not None:
        from .not_provided import NotProvided

        raise NotProvided(reason)
