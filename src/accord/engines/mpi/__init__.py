"""Backend "mpi": accord's API, checks and diagnostics on an MPI library's own collectives.

``init_process_group("mpi")`` in a program started by ``mpiexec -n N`` (or ``srun``) takes
its ranks from MPI and runs every collective with MPI's (through mpi4py), every send and
receive with MPI's, on NumPy arrays and CPU torch tensors. Modules: ``runtime`` (mpi4py,
datatypes and ops, waiting), ``algorithms`` (the collectives), ``call`` (one call),
``engine`` (the group's engine), ``p2p`` (sends and receives), ``world`` (init). Must not know
about the API, the world, the other engines or the launcher.
"""
