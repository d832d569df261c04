"""Backend "nccl": CUDA tensors of accord's groups carried by torch's ProcessGroupNCCL.

``init_process_group("cpu:accord,cuda:nccl")`` (or ``"nccl"``) gives every group of the world
(the default group and each ``new_group``) a torch NCCL backend for the same ranks, made on
the group's store; accord's API sends a CUDA tensor there and everything else to accord's own
backend. ``device_group`` owns that; ``c10d_store`` shows accord's Store to torch. Needs torch;
imported only when a world names a device backend.
"""
