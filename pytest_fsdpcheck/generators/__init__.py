"""Hypothesis strategies and builders for module trees, FX graphs and
traceable models (public through :mod:`pytest_fsdpcheck.strategies`)."""
