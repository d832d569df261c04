"""Device routing: the calls on tensors of another device go to that device's library.

``nccl``: a CUDA tensor's calls go to torch's own NCCL process group, made beside the
accord group (the API asks a group's ``device_groups`` which one ``claims`` a tensor).
A device module imports torch lazily; it knows only the foundation and the stores, never
the group layer, the API or the other directories here.
"""
