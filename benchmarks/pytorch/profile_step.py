#!/usr/bin/env python3
"""PyTorch's side of the per-op GPU profile: the peer of `dpx bench --profile-ops` on CUDA.

One training step of torchvision models (the step of train_step.py: SGD with Nesterov momentum 0.9,
lr 0.05, 10 classes, cross-entropy, random 3xSxS input kept on the GPU), profiled with torch.profiler
over a few steps after warm-up. Each aten op's own GPU time (self device time: the kernels it launched
itself, not its children's), its own host time and its calls are divided by the steps and written as
CSV rows; a row with op "(step)" holds the step's wall time, all kernels' time and the kernel count.

Usage: profile_step.py --out FILE.csv [--models resnet18,resnet50] [--precisions fp32,tf32,bf16]
                       [--batch 64] [--size 224] [--steps 3] [--warmup 3] [--benchmark 1] [--device cuda]
                       [--shapes]
--precisions: fp32 (no TF32 anywhere), tf32 (TF32 in convolutions and matrix products), bf16
(torch.autocast in bfloat16; fp32 weights and optimizer). --benchmark: torch.backends.cudnn.benchmark
(1: every convolution shape's algorithm found by timing, as dpx's --cudnn-algo search; 0: cuDNN's
heuristics, as dpx's default). A model that fails (out of memory, say) is reported on stderr and
left out; the exit status is then 1. --device cpu profiles on the CPU (the GPU columns then hold 0,
and fp32 only), the peer of dpx's CPU --profile-ops. --shapes: the peer of dpx's --profile-shapes, a
row per op and input shapes (record_shapes, key_averages(group_by_input_shape=True)); the column
shape then holds the op's input shapes as a JSON list of lists ([] for a non-tensor argument),
else it is empty.
"""
import argparse
import csv
import json
import sys
import time

import torch
import torch.nn as nn
import torchvision
from torch.profiler import ProfilerActivity, profile

COLUMNS = ["engine", "model", "precision", "batch", "size", "cudnn", "op", "calls_per_step", "gpu_ms_per_step",
           "host_ms_per_step", "kernels_per_step", "shape"]


def self_device_us(e):
    """An averaged event's own device time in microseconds (the attribute's name moved in torch 2.x)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        v = getattr(e, name, None)
        if v is not None:
            return float(v)
    return 0.0


def is_device_event(e):
    """A kernel, memcpy or memset row of key_averages (not an op run by the host)."""
    dt = getattr(e, "device_type", None)
    return dt is not None and str(dt).endswith("CUDA")


def profile_one(name, precision, args, writer):
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = bool(args.benchmark)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = getattr(torchvision.models, name)(num_classes=10).to(dev).train()
    x = torch.randn(args.batch, 3, args.size, args.size, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(args.warmup):
        step()
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities, record_shapes=args.shapes) as prof:
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        sync()
        wall = time.perf_counter() - t0
    n = args.steps
    cudnn = "benchmark" if args.benchmark else "heuristic"
    base = ["pytorch", name, precision, args.batch, args.size, cudnn]
    kernels = 0
    kernel_us = 0.0
    rows = []
    averages = prof.key_averages(group_by_input_shape=args.shapes)
    # A user annotation (Optimizer.step#SGD.step) shows up twice: as a host range and as a device
    # range of the same name, which is no kernel.
    host_keys = {e.key for e in averages if not is_device_event(e)}
    for e in averages:
        if is_device_event(e):
            if e.key in host_keys or getattr(e, "is_user_annotation", False):
                continue
            kernels += e.count
            kernel_us += self_device_us(e)
            continue
        gpu_us = self_device_us(e)
        host_us = float(getattr(e, "self_cpu_time_total", 0.0))
        if gpu_us <= 0 and host_us <= 0:
            continue
        shape = json.dumps(e.input_shapes, separators=(",", ":")) if args.shapes else ""
        rows.append(((gpu_us, host_us), [e.key, f"{e.count / n:g}", f"{gpu_us / n / 1e3:.4f}", f"{host_us / n / 1e3:.4f}", "",
                                         shape]))
    writer.writerow(base + ["(step)", "1", f"{kernel_us / n / 1e3:.4f}", f"{wall / n * 1e3:.4f}", f"{kernels / n:g}", ""])
    for _, r in sorted(rows, key=lambda t: t[0], reverse=True):
        writer.writerow(base + r)
    print(f"pytorch {name} {precision} batch {args.batch}: step {wall / n * 1e3:.2f} ms wall, "
          f"kernels {kernel_us / n / 1e3:.2f} ms, {kernels / n:g} kernels per step", file=sys.stderr)
    del model, opt, x, y
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="resnet18,resnet50,vgg16,densenet121,squeezenet1_1,efficientnet_b0,swin_t")
    ap.add_argument("--precisions", default="fp32,tf32,bf16")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--benchmark", type=int, choices=[0, 1], default=1)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--shapes", action="store_true", help="a row per op and input shapes")
    args = ap.parse_args()
    precisions = [p for p in args.precisions.split(",") if p]
    for p in precisions:
        if p not in ("fp32", "tf32", "bf16"):
            ap.error(f"--precisions: unknown precision '{p}': use fp32, tf32 or bf16")
    if args.steps < 1 or args.warmup < 0 or args.batch < 1 or args.size < 1:
        ap.error("--steps, --batch and --size must be at least 1, --warmup at least 0")
    if args.device == "cpu" and precisions != ["fp32"]:
        ap.error("--device cpu profiles fp32 only: pass --precisions fp32")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("profile_step.py: no CUDA device visible to PyTorch (--device cpu profiles on the CPU)", file=sys.stderr)
        return 3
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"# torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
          f"{where}, cudnn.benchmark={bool(args.benchmark)}", file=sys.stderr)
    status = 0
    with open(args.out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for precision in precisions:
            for name in [m for m in args.models.split(",") if m]:
                try:
                    profile_one(name, precision, args, writer)
                except Exception as e:  # one model's failure (out of memory) leaves the others
                    print(f"profile_step.py: {name} {precision}: {type(e).__name__}: {e}", file=sys.stderr)
                    status = 1
                    if args.device == "cuda":
                        torch.cuda.empty_cache()
                f.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
