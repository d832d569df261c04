"""Differential tests: the same SPMD scripts on torch.distributed (gloo) and on accord."""
