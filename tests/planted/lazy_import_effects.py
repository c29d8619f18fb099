"""A library with import-time effects on process-wide state, imported
lazily by tests.planted.misbehaving:ImportsLazily. Each is one a real
library has: rich draws an id from ``random``, Inductor sets an
environment variable, setuptools appends its vendored folder to the
import path; numpy and torch generators are drawn from too."""

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
