"""A module of tests.planted.reimports' own, re-imported by its calls: its
import-time code turns Dynamo off for the process."""

import torch._dynamo

torch._dynamo.config.disable = True
