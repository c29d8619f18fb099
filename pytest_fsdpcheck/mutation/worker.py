"""``python -m pytest_fsdpcheck.mutation.worker --port P``: a Cosmic Ray HTTP
worker that mutates only the overlay copies in its working directory."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .child import PARENT
from .session import OVERLAY_MARK, torch_root


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_fsdpcheck.mutation.worker")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    here = Path.cwd().resolve()
    # work items name paths relative to the working directory: anywhere but
    # an overlay folder they could name the installed torch's files
    if not (here / OVERLAY_MARK).is_file() or here.is_relative_to(torch_root()):
        print(f"error: {here} is not a mutation overlay folder", file=sys.stderr)
        return 2
    from cosmic_ray.distribution.http import run_worker

    os.environ[PARENT] = str(os.getpid())

    run_worker(port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
