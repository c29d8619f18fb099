"""Another installed tool's writes, as framework CI images have them: a
plugin's folder in the run's folder from Python (pytest-benchmark's
``.benchmarks``), and CUDA's per-user cache under HOME from C (``~/.nv``,
made by the driver with no Python audit event). Loaded with ``-p``."""

import ctypes
import os
import pathlib


def pytest_configure(config):
    pathlib.Path(".benchmarks").mkdir(exist_ok=True)
    ctypes.CDLL(None).mkdir(os.path.join(os.environ["HOME"], ".nv").encode(), 0o755)
