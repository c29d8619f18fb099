"""A framework's own implementation of the traversal area, as the suite
calls it (pytest_fsdpcheck/contract.py): here, a delegate to the project's
reference, standing for a framework's fork of torch's code."""

from pytest_fsdpcheck.contract import Implementation
from pytest_fsdpcheck.reference.traversal import ReferenceTraversal


class MyFramework(Implementation):
    traversal = ReferenceTraversal()
