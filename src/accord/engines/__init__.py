"""Engines other than accord's own mesh engine (``group.mesh_engine``): each runs a group's
calls behind the group layer's ``group.engine.Engine`` interface.

``mpi``: the calls on an MPI library's communicators (backend "mpi"). An engine imports its
foreign library (mpi4py) lazily: importing accord never imports it. Engines sit above the
group layer (they implement its interface) and below the API; they must not know the API,
the world, the diagnostics, each other or the launcher.
"""
