"""``Backend``: torch's string-like enum of backend names, plus accord's own, and plugins.

Owns: name parsing ("GLOO" → "gloo"), the registry of third-party backends
(``Backend.register_backend``), and which names accord's CPU backend answers to. Must not
know about groups.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any, ClassVar


class Backend(str):
    """A backend name (torch.distributed.Backend): a str, compared case-insensitively.

    accord's CPU backend answers to ``"accord"`` and to ``"gloo"`` (so torch programs run
    unchanged); ``None`` in init_process_group picks it.
    """

    UNDEFINED = "undefined"
    GLOO = "gloo"
    NCCL = "nccl"
    UCC = "ucc"
    MPI = "mpi"
    XCCL = "xccl"
    FAKE = "fake"
    ACCORD = "accord"

    backend_list: ClassVar[list[str]] = [UNDEFINED, GLOO, NCCL, UCC, MPI, XCCL, FAKE, ACCORD]
    default_device_backend_map: ClassVar[dict[str, str]] = {"cpu": ACCORD}
    backend_capability: ClassVar[dict[str, list[str]]] = {
        GLOO: ["cpu"],
        ACCORD: ["cpu"],
        MPI: ["cpu"],
        NCCL: ["cuda"],
    }
    backend_type_map: ClassVar[dict[str, int]] = {
        UNDEFINED: 0,
        GLOO: 1,
        NCCL: 2,
        UCC: 3,
        MPI: 4,
        XCCL: 5,
        FAKE: 6,
        ACCORD: 7,
    }
    _plugins: ClassVar[dict[str, tuple[Callable[..., Any], bool, list[str]]]] = {}

    def __new__(cls, name: str) -> Backend:
        if not isinstance(name, str):
            raise ValueError(f"Backend constructor parameter must be a string, got {type(name).__name__}")
        value = getattr(Backend, name.upper(), Backend.UNDEFINED)
        if value == Backend.UNDEFINED:
            value = name.lower()
        return super().__new__(cls, value)

    @classmethod
    def register_backend(
        cls,
        name: str,
        func: Callable[..., Any],
        extended_api: bool = False,
        devices: str | list[str] | None = None,
    ) -> None:
        """Register a third-party backend: ``func(store, rank, world_size, timeout)`` must
        return an object that accord uses as the group (duck-typed: rank(), size(), …)."""
        if hasattr(Backend, name.upper()):
            raise ValueError(f"{name.upper()} backend is already registered")
        setattr(Backend, name.upper(), name.lower())
        cls.backend_list.append(name.lower())
        device_list = [devices] if isinstance(devices, str) else list(devices or ["cpu"])
        cls.backend_capability[name.lower()] = device_list
        cls._plugins[name.lower()] = (func, extended_api, device_list)


#: Names served by accord's own CPU backend.
CPU_BACKENDS = {Backend.ACCORD, Backend.GLOO}

#: Backends that run a whole world on another engine: name → "module:function", imported
#: when used. The function takes init_process_group's keywords and returns the World.
WORLD_PROVIDERS = {Backend.MPI: "accord.engines.mpi.world:init_world"}


def is_mpi_available() -> bool:
    """Whether backend "mpi" can be used: mpi4py is installed (not imported here: importing
    it starts MPI)."""
    try:
        return importlib.util.find_spec("mpi4py") is not None
    except (ImportError, ValueError):
        return False


def is_nccl_available() -> bool:
    """Whether torch is installed and built with NCCL (imports torch if installed)."""
    try:
        if importlib.util.find_spec("torch") is None:
            return False
        import torch.distributed
    except (ImportError, ValueError):
        return False
    return bool(torch.distributed.is_available() and torch.distributed.is_nccl_available())


def world_provider(name: str) -> Callable[..., Any] | None:
    """The function that builds a world of backend ``name`` on another engine, or None when
    accord's own transport runs it."""
    target = WORLD_PROVIDERS.get(name)
    if target is None:
        return None
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


#: Device backends: a tensor of the device kind goes to this backend's torch process group,
#: made by "module:function" (imported when a world names it).
DEVICE_PROVIDERS = {Backend.NCCL: "accord.devices.nccl.device_group:create"}
_DEVICE_KINDS = {Backend.NCCL: "cuda"}


def get_default_backend_for_device(device: Any) -> str:
    """The backend accord uses for tensors of ``device`` (a name such as "cuda:1", or a
    torch.device) when init_process_group names none for it: "accord" for CPU, "nccl" for
    CUDA (torch's: "gloo" and "nccl"; accord's CPU backend also answers to "gloo").

    Raises:
        ValueError: no backend of accord's takes that device (torch's message).
    """
    kind = str(getattr(device, "type", device)).split(":", 1)[0]
    backends = {**Backend.default_device_backend_map, **{k: b for b, k in _DEVICE_KINDS.items()}}
    backend = backends.get(kind)
    if backend is None:
        raise ValueError(f"Default backend not registered for device : {device}")
    return str(backend)


def _parse(backend: str) -> tuple[str, dict[str, str]]:
    """("cpu" backend name, {device kind: device backend}) of a backend string: "nccl" and
    "cuda:nccl" keep accord's CPU backend for CPU tensors (torch would have none)."""
    if ":" not in backend:
        name = str(Backend(backend))
        if name in DEVICE_PROVIDERS:
            return Backend.ACCORD, {_DEVICE_KINDS[name]: name}
        return name, {}
    pairs: dict[str, str] = {}
    for part in backend.split(","):
        device, sep, value = part.strip().partition(":")
        if not sep or not device or not value:
            raise ValueError(
                f"backend {backend!r}: expected 'device:backend' pairs like "
                f"'cpu:accord,cuda:nccl', got {part!r}"
            )
        pairs[device.strip().lower()] = str(Backend(value.strip()))
    cpu = pairs.pop("cpu", Backend.ACCORD)
    for device, name in pairs.items():
        if _DEVICE_KINDS.get(name) != device:
            raise ValueError(
                f"backend {backend!r}: accord routes {device} tensors to no {name!r} backend; it "
                f"takes 'cuda:nccl' (CUDA tensors through torch's NCCL) besides its CPU backend"
            )
    return cpu, pairs


def device_backends(backend: str | None) -> dict[str, str]:
    """{device kind: backend} for the non-CPU devices a backend string names
    ({"cuda": "nccl"} for "nccl" or "cpu:gloo,cuda:nccl"); {} for CPU-only backends."""
    if backend is None:
        return {}
    return _parse(backend)[1]


def device_provider(name: str) -> Callable[..., Any]:
    """The function that makes a device group of backend ``name`` (see DEVICE_PROVIDERS)."""
    module, function = DEVICE_PROVIDERS[name].split(":")
    try:
        return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]
    except ImportError as exc:
        raise ValueError(
            f"backend {name!r} for CUDA tensors needs torch with CUDA (pip install torch): {exc}"
        ) from exc


def resolve_backend(backend: str | None) -> str:
    """The name of the backend that carries CPU tensors for ``init_process_group(backend=…)``.

    Accepts None, "accord", "gloo", "mpi", a registered plugin, and torch's
    "cpu:gloo,cuda:nccl" form; "nccl" and "cuda:nccl" alone keep accord's CPU backend for
    CPU tensors (the device backends are ``device_backends``).

    Raises:
        ValueError: a backend accord does not provide (ucc, xccl …), with what to use.
    """
    if backend is None:
        return Backend.ACCORD
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str or None, got {type(backend).__name__}")
    name = _parse(backend)[0]
    if name in CPU_BACKENDS or name in Backend._plugins:
        return name
    if name == Backend.MPI:
        if not is_mpi_available():
            raise ValueError(
                "backend 'mpi' needs mpi4py, which is not installed: pip install \"accord[mpi]\" "
                "(mpi4py with MPICH from PyPI), or pip install mpi4py built against your "
                "cluster's MPI; then start the program with mpiexec -n N python prog.py"
            )
        return name
    raise ValueError(
        f"backend {backend!r} is not available in accord (it provides its CPU backend as "
        f"'accord' or 'gloo', 'mpi' on mpi4py, and 'nccl' for CUDA tensors through torch). "
        f"Use backend='gloo' or None"
    )


def is_backend_available(backend: str) -> bool:
    """Whether ``init_process_group(backend)`` can work here ("nccl": torch has NCCL)."""
    try:
        resolve_backend(backend)
        devices = device_backends(backend)
    except (ValueError, TypeError):
        return False
    return not devices or is_nccl_available()
