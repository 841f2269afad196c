"""Writes the image fixtures of dpx's decode and transform tests (tests/core/data/images/): small
JPEG and PNG files of every colour type, bit depth and layout PIL reads, what PIL's
Image.open(f).convert("RGB") makes of each, and what torchvision 0.14's transforms make of a photo
(RandomResizedCrop's resized_crop for given boxes, flips, Resize + CenterCrop, ToTensor +
Normalize), plus a two-class image folder and torchvision's ImageFolder tensors of its val split.
The C++ tests read these files; no Python runs at test time.

Run from the repository root with the Python that has torch, torchvision and PIL (Debian's):
    /usr/bin/python3 benchmarks/pytorch/make_image_fixtures.py [--out tests/core/data/images]"""
import argparse
import ctypes
import ctypes.util
import io
import os
import shutil
import struct
import sys
import zlib

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import write_safetensors  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def photo(w, h, seed):
    """Photo-like RGB: smooth gradients, a few hard edges, some noise (uint8, (h, w, 3))."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.zeros((h, w, 3))
    for c in range(3):
        fx, fy, ph = rng.uniform(0.5, 3), rng.uniform(0.5, 3), rng.uniform(0, 6.28)
        img[..., c] = 128 + 80 * np.sin(fx * 6.28 * x / w + ph) * np.cos(fy * 6.28 * y / h)
    for _ in range(3):  # rectangles with hard edges
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        img[y0:y0 + h // 3, x0:x0 + w // 3] = rng.uniform(0, 255, 3)
    img += rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


# ---- PNG written by hand: every colour type and bit depth, palettes, tRNS, Adam7 -------------

def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _pack_rows(samples, bit_depth):
    """samples: (h, w*channels) ints -> filter-0 scanlines."""
    out = bytearray()
    for row in samples:
        out.append(0)
        if bit_depth == 16:
            out += b"".join(struct.pack(">H", int(v)) for v in row)
        elif bit_depth == 8:
            out += bytes(int(v) for v in row)
        else:
            per = 8 // bit_depth
            for i in range(0, len(row), per):
                byte = 0
                for k in range(per):
                    v = int(row[i + k]) if i + k < len(row) else 0
                    byte |= v << (8 - bit_depth * (k + 1))
                out.append(byte)
    return bytes(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def write_png(path, samples, color_type, bit_depth, palette=None, trns=None, interlace=False):
    """samples: (h, w, channels) array of ints in the PNG's sample range."""
    h, w, ch = samples.shape
    if interlace:
        raw = b""
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.size:
                raw += _pack_rows(sub.reshape(sub.shape[0], -1), bit_depth)
    else:
        raw = _pack_rows(samples.reshape(h, -1), bit_depth)
    png = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, int(interlace)))
    if palette is not None:
        png += _chunk(b"PLTE", bytes(np.asarray(palette, dtype=np.uint8).reshape(-1)))
    if trns is not None:
        png += _chunk(b"tRNS", trns)
    png += _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def png_cases(out, rng):
    w, h = 23, 17
    rgb = photo(w, h, 1).astype(np.int64)
    grey = rgb.mean(axis=2, keepdims=True).astype(np.int64)
    alpha = rng.integers(0, 256, (h, w, 1))
    wide = lambda a: a * 256 + rng.integers(0, 256, a.shape)  # 16-bit samples, low bytes not all 0
    pal = rng.integers(0, 256, (256, 3))
    cases = {
        "grey1.png": (grey >> 7, 0, 1, {}),
        "grey2.png": (grey >> 6, 0, 2, {}),
        "grey4.png": (grey >> 4, 0, 4, {}),
        "grey8.png": (grey, 0, 8, {}),
        "grey8_trns.png": (grey, 0, 8, {"trns": struct.pack(">H", int(grey[0, 0, 0]))}),
        # PIL clips 16-bit grey to 255 when it converts to RGB: values across the whole range.
        "grey16.png": (rng.integers(0, 65536, (h, w, 1)) // rng.integers(1, 300, (h, w, 1)), 0, 16, {}),
        "greyalpha8.png": (np.concatenate([grey, alpha], 2), 4, 8, {}),
        "greyalpha16.png": (wide(np.concatenate([grey, alpha], 2)), 4, 16, {}),
        "rgb8.png": (rgb, 2, 8, {}),
        "rgb8_trns.png": (rgb, 2, 8, {"trns": struct.pack(">HHH", *[int(v) for v in rgb[0, 0]])}),
        "rgb16.png": (wide(rgb), 2, 16, {}),
        "rgba8.png": (np.concatenate([rgb, alpha], 2), 6, 8, {}),
        "rgba16.png": (wide(np.concatenate([rgb, alpha], 2)), 6, 16, {}),
        "palette1.png": (rng.integers(0, 2, (h, w, 1)), 3, 1, {"palette": pal[:2]}),
        "palette2.png": (rng.integers(0, 4, (h, w, 1)), 3, 2, {"palette": pal[:4]}),
        "palette4.png": (rng.integers(0, 16, (h, w, 1)), 3, 4, {"palette": pal[:16]}),
        "palette8.png": (rng.integers(0, 200, (h, w, 1)), 3, 8, {"palette": pal[:200]}),
        "palette8_trns.png": (rng.integers(0, 200, (h, w, 1)), 3, 8,
                              {"palette": pal[:200], "trns": bytes(rng.integers(0, 256, 50, dtype=np.uint8))}),
        "rgb8_interlaced.png": (rgb, 2, 8, {"interlace": True}),
        "grey16_interlaced.png": (rng.integers(0, 400, (h, w, 1)), 0, 16, {"interlace": True}),
    }
    for name, (samples, ct, depth, extra) in cases.items():
        write_png(os.path.join(out, name), samples, ct, depth, **extra)
    return list(cases)


# ---- JPEG: PIL's writer, and TurboJPEG's for YCCK (PIL writes CMYK as CMYK, never YCCK) ---------

def write_ycck(path, cmyk_ink, quality=90):
    """cmyk_ink: (h, w, 4) ink amounts; stored inverted (Adobe's convention) as YCCK by tjCompress2."""
    lib = ctypes.CDLL(ctypes.util.find_library("turbojpeg") or "libturbojpeg.so.0")
    lib.tjInitCompress.restype = ctypes.c_void_p
    handle = ctypes.c_void_p(lib.tjInitCompress())
    stored = np.ascontiguousarray(255 - cmyk_ink, dtype=np.uint8)
    h, w, _ = stored.shape
    buf, size = ctypes.POINTER(ctypes.c_ubyte)(), ctypes.c_ulong(0)
    TJPF_CMYK, TJSAMP_420 = 11, 2
    rc = lib.tjCompress2(handle, stored.ctypes.data_as(ctypes.c_void_p), w, 0, h, TJPF_CMYK, ctypes.byref(buf),
                         ctypes.byref(size), TJSAMP_420, quality, 0)
    if rc != 0:
        raise RuntimeError("tjCompress2 failed")
    with open(path, "wb") as f:
        f.write(ctypes.string_at(buf, size.value))
    lib.tjFree(buf)
    lib.tjDestroy(handle)


def jpeg_cases(out, rng):
    w, h = 37, 29  # not a multiple of the 16-pixel MCU: edge blocks are partial
    rgb = photo(w, h, 2)
    im = Image.fromarray(rgb)
    im.save(os.path.join(out, "rgb420.jpg"), quality=90)
    im.save(os.path.join(out, "rgb422.jpg"), quality=90, subsampling=1)
    im.save(os.path.join(out, "rgb444.jpg"), quality=95, subsampling=0)
    im.save(os.path.join(out, "progressive.jpg"), quality=85, progressive=True)
    im.convert("L").save(os.path.join(out, "grey.jpg"), quality=90)
    cmyk = np.concatenate([rgb[..., :3] // 2, rng.integers(0, 120, (h, w, 1), dtype=np.uint8)], 2)
    Image.fromarray(cmyk, "CMYK").save(os.path.join(out, "cmyk.jpg"), quality=90)
    write_ycck(os.path.join(out, "ycck.jpg"), cmyk)
    Image.fromarray(rgb[:1, :1]).save(os.path.join(out, "one_pixel.jpg"), quality=90)
    return ["rgb420.jpg", "rgb422.jpg", "rgb444.jpg", "progressive.jpg", "grey.jpg", "cmyk.jpg", "ycck.jpg",
            "one_pixel.jpg"]


def to_model(img):
    return F.normalize(F.to_tensor(img), MEAN, STD)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/core/data/images")
    args = ap.parse_args()
    out = args.out
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    rng = np.random.default_rng(0)
    tensors = {}

    # Decoding: PIL's RGB of each file.
    files = jpeg_cases(out, rng) + png_cases(out, rng)
    for name in files:
        with Image.open(os.path.join(out, name)) as im:
            tensors["decode/" + name] = torch.from_numpy(np.array(im.convert("RGB")))

    # ToTensor + Normalize of every 8-bit value in each channel.
    ramp = np.stack([np.arange(256), 255 - np.arange(256), (np.arange(256) * 7) % 256], 1)[None].astype(np.uint8)
    tensors["normalize/ramp"] = torch.from_numpy(ramp)
    tensors["normalize/out"] = to_model(Image.fromarray(ramp))

    # RandomResizedCrop's resized_crop and the flip for given boxes, on a photo (JPEG, 4:2:0).
    Image.fromarray(photo(83, 61, 3)).save(os.path.join(out, "photo.jpg"), quality=90)
    src = Image.open(os.path.join(out, "photo.jpg")).convert("RGB")
    crops = [  # top, left, height, width, size, flip
        (5, 7, 40, 50, 24, 0),    # downscale, both sides
        (0, 0, 61, 83, 32, 1),    # the whole image, flipped
        (20, 30, 7, 10, 24, 0),   # upscale
        (3, 4, 24, 24, 24, 1),    # no resize: torchvision returns the crop itself
        (10, 2, 50, 13, 16, 0),   # tall and thin
        (0, 60, 9, 23, 20, 1),    # at the right edge
    ]
    tensors["rrc/params"] = torch.tensor(crops, dtype=torch.int64)
    for k, (top, left, h, w, size, flip) in enumerate(crops):
        img = F.resized_crop(src, top, left, h, w, [size, size], T.InterpolationMode.BILINEAR)
        if flip:
            img = F.hflip(img)
        tensors[f"rrc/{k}"] = to_model(img)

    # Evaluation: Resize(resize) + CenterCrop(size).
    evals = [(36, 32), (32, 32), (45, 40), (61, 24), (25, 25), (37, 31)]
    tensors["eval/params"] = torch.tensor(evals, dtype=torch.int64)
    for k, (resize, size) in enumerate(evals):
        tensors[f"eval/{k}"] = to_model(T.Compose([T.Resize(resize), T.CenterCrop(size)])(src))

    # A larger JPEG for DCT-domain scaling (dpx decodes it at 1/2, 1/4 or 1/8): torchvision's
    # full-size results, which dpx's scaled ones are compared with.
    Image.fromarray(photo(320, 240, 4)).save(os.path.join(out, "large.jpg"), quality=85)
    large = Image.open(os.path.join(out, "large.jpg")).convert("RGB")
    large_crops = [(0, 0, 240, 320, 32, 0), (20, 40, 200, 180, 24, 1), (100, 100, 130, 200, 16, 0)]
    tensors["large/params"] = torch.tensor(large_crops, dtype=torch.int64)
    for k, (top, left, h, w, size, flip) in enumerate(large_crops):
        img = F.resized_crop(large, top, left, h, w, [size, size], T.InterpolationMode.BILINEAR)
        if flip:
            img = F.hflip(img)
        tensors[f"large/{k}"] = to_model(img)
    tensors["large/eval"] = to_model(T.Compose([T.Resize(36), T.CenterCrop(32)])(large))

    # A two-class image folder with train/ and val/, and torchvision's ImageFolder over val/ with
    # the evaluation transforms at size 16 (Resize(18) = 16 * 256 // 224, CenterCrop(16)).
    folder = os.path.join(out, "folder")
    sizes = {"train": [(20, 15), (15, 22), (31, 17)], "val": [(19, 14), (14, 19)]}
    for split, dims in sizes.items():
        for ci, cls in enumerate(["cat", "dog"]):
            os.makedirs(os.path.join(folder, split, cls))
            for k, (w, h) in enumerate(dims):
                img = Image.fromarray(photo(w, h, 100 + ci * 10 + k))
                if k % 2:
                    img.save(os.path.join(folder, split, cls, f"{k}.png"))
                else:
                    img.save(os.path.join(folder, split, cls, f"{k}.jpg"), quality=90)
    ds = torchvision.datasets.ImageFolder(os.path.join(folder, "val"),
                                          T.Compose([T.Resize(18), T.CenterCrop(16), T.ToTensor(), T.Normalize(MEAN, STD)]))
    tensors["folder/val_images"] = torch.stack([ds[i][0] for i in range(len(ds))])
    tensors["folder/val_labels"] = torch.tensor([ds[i][1] for i in range(len(ds))], dtype=torch.int64)

    write_safetensors(os.path.join(out, "expected.safetensors"), tensors,
                      {"generator": "benchmarks/pytorch/make_image_fixtures.py", "torch": torch.__version__,
                       "torchvision": torchvision.__version__, "PIL": Image.__version__})
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    print(f"wrote {len(files)} decode cases, {len(crops)} crops, {len(evals)} evaluation cases and a folder to {out} "
          f"({total / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
