"""Sphinx configuration of the pytest-fsdpcheck documentation (MyST Markdown).

The options reference, the known-bug list, the invariant catalog and the
table of checks on users' models are generated from the package at build time (docs/_ext/fsdpcheck_docs.py), so
they are never written twice. tests/test_docs.py builds this site with
warnings as errors and runs or checks every code block in it.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "pytest-fsdpcheck"
author = "pytest-fsdpcheck contributors"
extensions = ["myst_parser", "fsdpcheck_docs"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "examples", "README.md"]
html_static_path = ["_static"]
# wide generated tables wrap their code and scroll inside the page
html_css_files = ["fsdpcheck.css"]
html_theme = "alabaster"
# `[text](page.md#a-heading)` links between pages
myst_heading_anchors = 3
# a page's fenced code blocks are highlighted, never executed by Sphinx:
# tests/test_docs.py runs them
highlight_language = "none"
