"""Imported only by the forkserver of torch_forkserver.py, before it forks the tests' torch
children: torch, loaded as a child would load it, with the variables that torch's native
libraries read when they load (OpenMP's thread count, c10's log level) set as every child
sets them. Errors are the server's to ignore: a child then imports torch itself."""

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"

import torch  # noqa: E402,F401 — after the variables above
import torch._dynamo  # noqa: E402,F401 — DDP's first use imports it: about 1 s a process
