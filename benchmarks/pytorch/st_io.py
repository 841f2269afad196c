"""Reads and writes the safetensors format by hand (8-byte little-endian header length, JSON
header, raw little-endian bytes), so reference scripts need only torch, not the safetensors
package. Tensors are laid out in the given order, back to back, as dpx's reader requires."""
import json
import struct

import torch

_DTYPES = {
    torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8",
}
_FROM_NAME = {name: dtype for dtype, name in _DTYPES.items()}


def write_safetensors(path, tensors, metadata=None):
    """tensors: an ordered mapping name -> torch.Tensor (copied to contiguous CPU memory)."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        if t.dtype not in _DTYPES:
            raise ValueError(f"{name}: dtype {t.dtype} has no safetensors name here")
        # bfloat16 has no numpy type; its bytes are read through int16 of the same width.
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad so the byte buffer starts 8-aligned, as the reference
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    """Returns (dict name -> torch.Tensor, metadata dict)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        dtype = _FROM_NAME[e["dtype"]]
        buf = bytearray(data[begin:end])
        if dtype == torch.bfloat16:
            t = torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16) if buf else torch.empty(0, dtype=dtype)
        else:
            t = torch.frombuffer(buf, dtype=dtype) if buf else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(e["shape"])
    return out, metadata
