"""Runners of the distributed checks (SPL-16, FS2-9): they start the ranks,
run each implementation in them and hand the records to the checkers."""
