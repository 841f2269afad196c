#!/usr/bin/env python3
"""PyTorch peer of `dpx bench --parallel none`: one torchvision model, the same batch, input size
and optimiser (SGD, Nesterov momentum 0.9, lr 0.05; 10 classes; random 3xSxS input), mean forward /
backward / optimizer milliseconds per step after warm-up, and images/s.
Usage: train_step.py MODEL[,MODEL...] [batch=8] [size=64] [steps=10] [threads=2] [--device cpu|cuda]
                     [--tf32] [--bf16] [--channels-last] [--benchmark 0|1] [--warmup 2]
One line per model, in the order given (several models share one Python start-up).
On CUDA every phase ends with torch.cuda.synchronize(), as dpx's phase boundaries end with an
event; --tf32 allows TF32 in matrix products and convolutions (off: exact fp32, as dpx without
--tf32); --bf16 runs forward and backward under torch.autocast in bfloat16 (fp32 weights and
optimizer, PyTorch's mixed precision); --channels-last puts the model and the batch in
torch.channels_last (as dpx --memory-format channels_last); --benchmark sets
torch.backends.cudnn.benchmark (1, the
default here: algorithms found by timing, as dpx's --cudnn-algo search; 0: cuDNN's heuristics, as
dpx's default). On CUDA the line ends with the model's peak GPU memory over its steps, warm-up
included ("peak allocated A MB, reserved R MB": torch.cuda.max_memory_allocated and
max_memory_reserved, as dpx's peak_device_allocated_bytes / peak_device_reserved_bytes). Run on
the CPU with Debian's /usr/bin/python3 (torch 1.13)."""
import argparse
import time

import torch
import torch.nn as nn
import torchvision


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("model")
    ap.add_argument("numbers", nargs="*", type=int, help="batch size steps threads")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--benchmark", type=int, choices=[0, 1], default=1)
    args = ap.parse_args()
    if len(args.numbers) > 4:
        ap.error("at most four numbers: batch size steps threads")
    batch, size, steps, threads = (args.numbers + [8, 64, 10, 2][len(args.numbers):])[:4]
    torch.set_num_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = bool(args.benchmark)
    device = torch.device(args.device)
    for name in [m for m in args.model.split(",") if m]:
        run_model(name, device, batch, size, steps, threads, args)
        if device.type == "cuda":
            torch.cuda.empty_cache()


def run_model(name, device, batch, size, steps, threads, args):
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10).to(device)
    model.train()
    x = torch.randn(batch, 3, size, size, device=device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    loss_fn = nn.CrossEntropyLoss()
    fwd = bwd = upd = 0.0
    for s in range(steps + args.warmup):
        sync()
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            loss = loss_fn(model(x), y)
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        sync()
        t3 = time.perf_counter()
        if s >= args.warmup:
            fwd, bwd, upd = fwd + t1 - t0, bwd + t2 - t1, upd + t3 - t2
    total = fwd + bwd + upd
    where = torch.cuda.get_device_name() if device.type == "cuda" else f"threads {threads}"
    print(f"torch {torch.__version__} {name} batch {batch} {size}x{size} {where}"
          f"{' tf32' if args.tf32 else ''}{' bf16' if args.bf16 else ''}"
          f"{' channels_last' if args.channels_last else ''}: forward {fwd / steps * 1e3:.2f} ms, backward {bwd / steps * 1e3:.2f} ms, "
          f"optimizer {upd / steps * 1e3:.2f} ms, {batch * steps / total:.1f} img/s{peak_memory(device)}")


def peak_memory(device):
    if device.type != "cuda":
        return ""
    return (f", peak allocated {torch.cuda.max_memory_allocated() / 1e6:.0f} MB,"
            f" reserved {torch.cuda.max_memory_reserved() / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
