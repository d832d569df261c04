"""The benchmark: ``python -m accord.bench`` (nccl-tests-style tables, gloo side by side)."""
