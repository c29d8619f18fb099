"""pytest-fsdpcheck: conformance checks for PyTorch's FSDP/DDP internals.

Importing this package must stay cheap (no torch): the pytest plugin is
loaded in every pytest run of every project where the package is installed.
"""

__version__ = "0.1.0"
