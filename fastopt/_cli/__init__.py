"""The `fastopt` command line (python -m fastopt)."""
