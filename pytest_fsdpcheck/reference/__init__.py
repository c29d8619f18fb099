"""Executable specification of the four seed components: iterative, linear,
written from DESIGN.md and the seeds rather than from torch's code."""
