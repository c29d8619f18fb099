"""A third-party library with import-time effects on process-wide state,
installed as ``fsdpcheck_lazy_library`` outside the tests package by
tests/test_isolation.py and imported lazily by
tests.planted.misbehaving:ImportsLazily. Each effect is one a real library
has: rich draws an id from ``random``, Inductor sets an environment
variable, setuptools appends its vendored folder to the import path, others
raise the recursion limit; numpy and torch generators are drawn from too."""

import os
import random
import sys

import numpy
import torch

STYLE_ID = random.getrandbits(24)
NOISE = numpy.random.random(), torch.rand(1)
os.environ["FSDPCHECK_PLANTED_LIBRARY"] = "loaded"
if "/planted/vendor" not in sys.path:
    sys.path.append("/planted/vendor")
sys.setrecursionlimit(sys.getrecursionlimit() + 7)
