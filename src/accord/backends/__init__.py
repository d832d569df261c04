"""Other ways to run a group, each its own module behind the group layer's interface, and the
reverse direction: ``torch`` puts accord's groups behind torch.distributed's ProcessGroup.

Each backend module imports its foreign library (torch, mpi4py) lazily; importing accord
never imports them. Backends must not know each other or the launcher.
"""
