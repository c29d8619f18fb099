"""The example framework package the documentation's pages import and name
(`--fsdpcheck-model mypkg.models:make`). tests/test_docs.py puts docs/examples
on the import path and checks every such reference resolves."""
