#!/usr/bin/env python3
"""The peer of `dpx data bench`: torchvision's ImageFolder + DataLoader on the same folder, with the
same training transforms (RandomResizedCrop(size) + RandomHorizontalFlip + ToTensor + Normalize with
ImageNet's mean and std), timed the same way: `--warmup` batches first, then `--batches` batches by
the wall clock, per number of workers.

Decoders: `pil` (ImageFolder's default loader: PIL.Image.open(...).convert("RGB"), the transforms on
PIL images) and `tvio` (torchvision.io.decode_image on the file's bytes, ImageReadMode.RGB, the
transforms on uint8 tensors, antialiased; a file it cannot decode, e.g. a CMYK JPEG on older
torchvision, falls back to PIL: with --workers 0 the fallbacks are counted, with workers they
happen in the worker processes and are not).

Usage: loader_bench.py DIR [--decoder pil|tvio] [--workers 1,2] [--batch-size 64] [--image-size 224]
       [--batches 20] [--warmup 2]
Prints one line per number of workers: workers, images/s, images/s per core.
"""
import argparse
import os
import sys
import time

import torch
import torchvision
from torchvision import datasets, transforms

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class TvioLoader:
    """A loader for ImageFolder that decodes with torchvision.io; counts its PIL fallbacks."""

    def __init__(self):
        self.fallbacks = 0

    def __call__(self, path):
        from torchvision.io import ImageReadMode, decode_image, read_file
        try:
            return decode_image(read_file(path), mode=ImageReadMode.RGB)
        except RuntimeError:
            self.fallbacks += 1
            from PIL import Image
            with open(path, "rb") as f:
                return transforms.functional.pil_to_tensor(Image.open(f).convert("RGB"))


def make_set(root, decoder, size):
    train = os.path.join(root, "train")
    root = train if os.path.isdir(train) else root
    if decoder == "pil":
        tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
                                 transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
        return datasets.ImageFolder(root, tf), None
    loader = TvioLoader()
    tf = transforms.Compose([transforms.RandomResizedCrop(size, antialias=True), transforms.RandomHorizontalFlip(),
                             transforms.ConvertImageDtype(torch.float32), transforms.Normalize(MEAN, STD)])
    return datasets.ImageFolder(root, tf, loader=loader), loader


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--decoder", choices=["pil", "tvio"], default="pil")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)  # as each DataLoader worker does; the main process only waits
    data, loader = make_set(a.dir, a.decoder, a.image_size)
    cores = os.cpu_count() or 1
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, decoder {a.decoder}: {len(data)} images, "
          f"batch {a.batch_size}, {a.batches} timed batches after {a.warmup}; {cores} cores")
    print(f"{'workers':>8} {'images/s':>12} {'images/s per core':>18} {'ms per batch':>14}")
    for w in [int(x) for x in a.workers.split(",")]:
        dl = torch.utils.data.DataLoader(data, batch_size=a.batch_size, shuffle=True, num_workers=w, drop_last=True)
        images, seen, t0 = 0, 0, None
        while seen < a.warmup + a.batches:
            for x, _ in dl:
                if seen == a.warmup:
                    t0 = time.perf_counter()
                if seen >= a.warmup:
                    images += x.shape[0]
                seen += 1
                if seen == a.warmup + a.batches:
                    break
        wall = time.perf_counter() - t0
        rate = images / wall
        print(f"{w:>8} {rate:>12.1f} {rate / min(max(w, 1), cores):>18.1f} {wall / a.batches * 1e3:>14.2f}", flush=True)
    if loader is not None and loader.fallbacks:
        print(f"(tvio: {loader.fallbacks} file(s) decoded by PIL in the main process, --workers 0)")


if __name__ == "__main__":
    sys.exit(main())
