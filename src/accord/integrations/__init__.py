"""accord seen from other libraries: the reverse direction of the rest of the package.

``torch``: accord's groups behind torch.distributed's own ``ProcessGroup`` (backend
"accord" for ``torch.distributed.init_process_group``, DDP, FSDP, DeviceMesh, DTensor,
functional collectives). An integration sits above accord's API (it builds worlds with
``api.lifecycle``) and imports its library lazily; it must not know the launcher.
"""
