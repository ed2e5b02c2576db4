"""docs/reference.md, generated from the command line itself and from the vocabularies.

`python -m cowork_adapter.docsgen` rewrites the page; `--check` exits 1 when the page differs from what
the code makes now (tests/unit/test_docs_reference.py runs the same comparison). The meaning of each
stop reason, exit code, ledger status, audit finding reason and tampering kind lives in one table,
meanings.py, one line per member.
"""
