"""One tensor in Paddle 1.8's LoDTensor file layout: what ``fluid.io`` saves and loads, and
Fluid's ``save``/``load`` ops read and write.

Files move both ways between dask_fluid and real Fluid 1.8. Each tensor is written as:

- ``uint32`` version (0);
- ``uint64`` LoD level count, and each level as a ``uint64`` byte count followed by its
  ``uint64`` offsets;
- the tensor itself: ``uint32`` version (0), ``int32`` size of a ``TensorDesc`` protobuf
  (``data_type`` as Paddle's ``VarType.Type``, ``dims``), that protobuf, and the raw
  little-endian data.

A combined file is those records one after the other, in the order of the variables' names
(as Paddle's ``save_combine`` writes them).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np

__all__ = ["read_tensor", "write_tensor"]

#: Paddle's VarType.Type codes of the dense dtypes
_DTYPE_CODES = {np.dtype(np.bool_): 0, np.dtype(np.int16): 1, np.dtype(np.int32): 2,
                np.dtype(np.int64): 3, np.dtype(np.float16): 4, np.dtype(np.float32): 5,
                np.dtype(np.float64): 6, np.dtype(np.uint8): 20, np.dtype(np.int8): 21}
_CODE_DTYPES = {v: k for k, v in _DTYPE_CODES.items()}
#: a tensor file larger than this is not one of ours (a corrupt dims field)
_MAX_ELEMENTS = 1 << 40


# -- the LoDTensor binary layout --------------------------------------------------------------

def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 as 10-byte two's complement, as protobuf does
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift, value = 0, 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated TensorDesc (a varint runs past its end)")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("malformed TensorDesc (a varint longer than 10 bytes)")


def _tensor_desc(dtype: np.dtype, shape: tuple) -> bytes:
    out = bytes([0x08]) + _varint(_DTYPE_CODES[dtype])  # field 1, varint: data_type
    for d in shape:
        out += bytes([0x10]) + _varint(int(d))  # field 2, varint, one per dim (unpacked)
    return out


def _parse_tensor_desc(buf: bytes) -> tuple[np.dtype, tuple[int, ...]]:
    pos, code, dims = 0, None, []
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if field == 1 and wire == 0:
            code, pos = _read_varint(buf, pos)
        elif field == 2 and wire == 0:
            d, pos = _read_varint(buf, pos)
            dims.append(d - (1 << 64) if d >= 1 << 63 else d)
        elif field == 2 and wire == 2:  # packed dims
            length, pos = _read_varint(buf, pos)
            end = pos + length
            while pos < end:
                d, pos = _read_varint(buf, pos)
                dims.append(d - (1 << 64) if d >= 1 << 63 else d)
        else:
            raise ValueError(f"TensorDesc has an unexpected field {field} (wire type {wire})")
    if code not in _CODE_DTYPES:
        raise ValueError(f"TensorDesc data_type {code} is not a dense dtype dask_fluid reads "
                         f"(known: {sorted(_CODE_DTYPES)})")
    return _CODE_DTYPES[code], tuple(dims)


def write_tensor(f: BinaryIO, value: Any, lod: Sequence[Sequence[int]] = ()) -> None:
    """Write one LoDTensor record (see the module docstring) of a host array."""
    arr = np.ascontiguousarray(value)
    if arr.dtype not in _DTYPE_CODES:
        raise TypeError(f"cannot save a tensor of dtype {arr.dtype} in Paddle's layout; known "
                        f"dtypes: {sorted(str(d) for d in _DTYPE_CODES)}")
    f.write(struct.pack("<I", 0))
    f.write(struct.pack("<Q", len(lod)))
    for level in lod:
        data = np.asarray(level, dtype="<u8").tobytes()
        f.write(struct.pack("<Q", len(data)))
        f.write(data)
    f.write(struct.pack("<I", 0))
    desc = _tensor_desc(arr.dtype, arr.shape)
    f.write(struct.pack("<i", len(desc)))
    f.write(desc)
    f.write(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())


def _read_exactly(f: BinaryIO, n: int, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ValueError(f"the tensor file ends inside its {what} ({len(data)} of {n} bytes)")
    return data


def read_tensor(f: BinaryIO) -> tuple[np.ndarray, list[list[int]]]:
    """Read one LoDTensor record: ``(array, lod)``.

    Raises
    ------
    ValueError
        The bytes are not a LoDTensor record of a version dask_fluid reads (or are cut off).
    """
    (version,) = struct.unpack("<I", _read_exactly(f, 4, "version"))
    if version != 0:
        raise ValueError(f"LoDTensor version {version} is not supported (only 0)")
    (levels,) = struct.unpack("<Q", _read_exactly(f, 8, "LoD level count"))
    if levels > 64:
        raise ValueError(f"the tensor claims {levels} LoD levels: not a LoDTensor file")
    lod = []
    for _ in range(levels):
        (nbytes,) = struct.unpack("<Q", _read_exactly(f, 8, "LoD level size"))
        if nbytes % 8 or nbytes > 8 * _MAX_ELEMENTS:
            raise ValueError(f"a LoD level of {nbytes} bytes: not a LoDTensor file")
        lod.append(np.frombuffer(_read_exactly(f, nbytes, "LoD"), "<u8").astype(int).tolist())
    (tversion,) = struct.unpack("<I", _read_exactly(f, 4, "tensor version"))
    if tversion != 0:
        raise ValueError(f"Tensor version {tversion} is not supported (only 0)")
    (desc_size,) = struct.unpack("<i", _read_exactly(f, 4, "TensorDesc size"))
    if not 0 < desc_size < 1 << 16:
        raise ValueError(f"a TensorDesc of {desc_size} bytes: not a LoDTensor file")
    dtype, shape = _parse_tensor_desc(_read_exactly(f, desc_size, "TensorDesc"))
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if any(d < 0 for d in shape) or count > _MAX_ELEMENTS:
        raise ValueError(f"the tensor claims dims {list(shape)}: not a LoDTensor file")
    data = _read_exactly(f, count * dtype.itemsize, "data")
    arr = np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)
    return arr, lod
