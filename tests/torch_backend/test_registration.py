"""The backend is registered with torch without importing accord, and never breaks torch.

``import torch`` runs the ``torch.backends`` entry point (``_accord_torch_entry.register``):
it must register "accord" without importing accord (that is what keeps it cheap), and it must
never raise, whatever is missing. ``import accord`` registers the backend too when torch is
already imported. accord's NumPy path never imports torch (tests/differential checks that).
"""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

torch = pytest.importorskip("torch")


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_import_torch_registers_accord_without_importing_it() -> None:
    out = _python("import sys, torch, torch.distributed as d; "
                  "print('ACCORD' in d.Backend._plugins, 'accord' in sys.modules, "
                  "d.Backend('accord') == 'accord')")
    assert out == "True False True"


def test_import_accord_registers_when_torch_came_first() -> None:
    out = _python("import os; os.environ['TORCH_DEVICE_BACKEND_AUTOLOAD'] = '0'; "
                  "import torch, torch.distributed as d; before = 'ACCORD' in d.Backend._plugins; "
                  "import accord; print(before, 'ACCORD' in d.Backend._plugins)")
    assert out == "False True"


def test_entry_point_never_raises(monkeypatch) -> None:
    import importlib.util

    import _accord_torch_entry as entry

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace())  # no torch.distributed
    assert entry.register() is None
    broken = types.SimpleNamespace(distributed=types.SimpleNamespace(
        is_available=lambda: (_ for _ in ()).throw(RuntimeError("broken torch"))))
    monkeypatch.setitem(sys.modules, "torch", broken)
    assert entry.register() is None
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # accord absent
    monkeypatch.delitem(torch.distributed.Backend._plugins, "ACCORD", raising=False)
    try:
        assert entry.register() is None
        assert "ACCORD" not in torch.distributed.Backend._plugins
    finally:
        monkeypatch.undo()
        entry.register()
    assert "ACCORD" in torch.distributed.Backend._plugins


def test_accord_leaves_tensor_storage_resizable() -> None:
    """accord's own API on a torch tensor: the storage can still be freed (FSDP does)."""
    import accord
    from accord.arrays import as_buffer

    t = torch.ones(8)
    buf = as_buffer(t, writable=True)
    buf.flat[:] = 3
    assert t.tolist() == [3.0] * 8
    del buf
    t.untyped_storage().resize_(0)
    assert accord.is_available()
