"""The array adapter: what may be passed, zero-copy views, write-back of non-contiguous views."""

from __future__ import annotations

import array

import numpy as np
import pytest

from accord.arrays import DTYPE_CODES, as_buffer


def test_contiguous_numpy_is_viewed_not_copied():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = as_buffer(data, writable=True)
    assert np.shares_memory(buf.flat, data) and not buf.is_copy
    assert (buf.count, buf.nbytes, buf.dtype_name, buf.describe()) == (12, 48, "float32", "float32[3, 4]")


def test_non_contiguous_is_copied_and_written_back():
    base = np.zeros((3, 4))
    view = base[:, 1::2]
    buf = as_buffer(view, writable=True)
    assert buf.is_copy
    buf.flat[:] = 7
    assert (base == 0).all()  # nothing lands before finish()
    buf.finish()
    assert (base[:, 1::2] == 7).all() and (base[:, ::2] == 0).all()


def test_read_only_needs_only_reading():
    data = np.ones(3)
    data.flags.writeable = False
    assert as_buffer(data, writable=False).count == 3
    with pytest.raises(ValueError, match="read-only"):
        as_buffer(data, writable=True)


@pytest.mark.parametrize("bad", [[1, 2], 3.0, "abc", None, {"a": 1}])
def test_python_values_are_refused_with_a_hint(bad):
    with pytest.raises(TypeError, match="must be a NumPy array"):
        as_buffer(bad, writable=False)


def test_unsupported_dtypes_are_refused():
    with pytest.raises(TypeError, match="object"):
        as_buffer(np.array([object()]), writable=False)
    with pytest.raises(TypeError, match="big-endian"):
        as_buffer(np.zeros(2, dtype=">f4"), writable=False)


def test_buffer_protocol_objects_are_accepted():
    data = bytearray(b"abcd")
    buf = as_buffer(data, writable=True)
    buf.flat[0] = ord("z")
    assert data == bytearray(b"zbcd") and buf.dtype_name == "uint8"
    assert as_buffer(array.array("d", [1.0, 2.0]), writable=False).dtype_name == "float64"


def test_dtype_codes_are_stable():
    assert DTYPE_CODES["bool"] == 1 and DTYPE_CODES["float32"] == 12 and DTYPE_CODES["bfloat16"] == 11


class TestTorch:
    torch = pytest.importorskip("torch")

    def test_cpu_tensors_are_viewed(self):
        t = self.torch.arange(6, dtype=self.torch.float32)
        buf = as_buffer(t, writable=True)
        buf.flat[0] = 42
        assert t[0].item() == 42 and buf.dtype_name == "float32"

    def test_bfloat16_travels_as_bits(self):
        t = self.torch.tensor([1.0, 2.0], dtype=self.torch.bfloat16)
        buf = as_buffer(t, writable=True)
        assert buf.dtype_name == "bfloat16" and buf.flat.dtype == np.uint16
        buf.flat[:] = buf.flat[::-1].copy()
        assert t.tolist() == [2.0, 1.0]

    def test_non_contiguous_tensor_is_written_back(self):
        base = self.torch.zeros(4, 4)
        view = base.t()[1]
        buf = as_buffer(view, writable=True)
        buf.flat[:] = 5
        buf.finish()
        assert base[:, 1].tolist() == [5.0] * 4 and base.sum().item() == 20

    def test_requires_grad_tensors_are_usable(self):
        t = self.torch.ones(3, requires_grad=True)
        buf = as_buffer(t, writable=True)
        buf.flat[:] = 2
        assert t.detach().tolist() == [2.0] * 3

    def test_meta_device_is_refused(self):
        t = self.torch.empty(3, device="meta")
        with pytest.raises(ValueError, match="CPU"):
            as_buffer(t, writable=True)


def test_plain_view_sees_plain_cpu_tensors_as_arrays_and_leaves_the_rest():
    """What the short paths take (``plain_view``): the tensor's own memory, its shape and
    element type, the storage still resizable; a view made once is handed out again only for
    a tensor with that address, type and shape; anything NumPy cannot stand for is returned
    as it is, for the long path."""
    torch = pytest.importorskip("torch")
    from accord.arrays import plain_view

    data = np.zeros(3)
    assert plain_view(data) is data and plain_view([1, 2]) == [1, 2]
    t = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    view = plain_view(t)
    assert type(view) is np.ndarray and view.shape == (2, 3) and view.dtype == np.int32
    view[1, 2] = 42
    assert t[1, 2].item() == 42 and plain_view(t) is view
    inner = torch.zeros(4)[1:]  # a contiguous view at an offset
    assert plain_view(inner).shape == (3,)
    plain_view(inner)[0] = 5.0
    assert inner[0].item() == 5.0
    t.untyped_storage().resize_(0)  # FSDP frees a flat parameter this way: still allowed
    assert plain_view(torch.ones(2, dtype=torch.bool)).dtype == np.bool_
    for other in [torch.zeros(2, dtype=torch.bfloat16), torch.zeros(4)[::2], torch.zeros(0),
                  torch.zeros(2, dtype=torch.complex64).conj(), torch.nn.Parameter(torch.zeros(2)),
                  torch.zeros(2, 2).t()]:
        assert plain_view(other) is other
