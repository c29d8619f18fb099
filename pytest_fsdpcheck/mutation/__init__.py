"""Mutation testing of the installed torch's code for each area, with Cosmic
Ray: how much of torch's real code the conformance suite guards.
``python -m pytest_fsdpcheck.mutation`` (see :mod:`.__main__`)."""
