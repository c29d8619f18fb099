"""Imported again by torch's planted annotation on every call
(:class:`tests.planted.torch_faults.AnnotationReimportsDynamoOff`): its
import turns Dynamo off for the whole process."""

import torch._dynamo

torch._dynamo.config.disable = True
