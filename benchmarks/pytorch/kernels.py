#!/usr/bin/env python3
"""PyTorch (CPU) peer of benchmarks/bench_kernels.cpp: the same GEMM, conv2d and depthwise conv2d
shapes at 1 and 2 threads, GFLOP/s with 2 FLOPs per multiply-add (conv backward = dx + dW + db =
2x forward).
Run with Debian's python3-torch: /usr/bin/python3 benchmarks/pytorch/kernels.py"""
import time

import torch
import torch.nn.functional as F


def rate(fn, flops, min_time=0.3):
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_time:
        fn()
        n += 1
    return flops * n / (time.perf_counter() - t0) / 1e9


CONVS = [  # N, C_in, C_out, H, k, stride, pad, groups — as in bench_kernels.cpp
    (8, 64, 64, 56, 3, 1, 1, 1),
    (8, 128, 128, 28, 3, 1, 1, 1),
    (2, 3, 64, 224, 7, 2, 3, 1),
    (8, 256, 64, 56, 1, 1, 0, 1),
    (8, 256, 256, 4, 3, 1, 1, 1),
    (8, 512, 512, 2, 3, 1, 1, 1),
    (8, 128, 32, 16, 3, 1, 1, 1),
    # 224x224 inputs: VGG-16's planes 224 ... 14, ResNet's 7x7, Swin-T's patch embedding
    (1, 64, 64, 224, 3, 1, 1, 1),
    (2, 128, 128, 112, 3, 1, 1, 1),
    (2, 256, 256, 56, 3, 1, 1, 1),
    (2, 512, 512, 28, 3, 1, 1, 1),
    (8, 512, 512, 14, 3, 1, 1, 1),
    (8, 512, 512, 7, 3, 1, 1, 1),
    (8, 3, 96, 224, 4, 4, 0, 1),
    # depthwise, EfficientNet-B0 shapes (kDepthwiseShapes)
    (8, 96, 96, 32, 3, 1, 1, 96),
    (8, 144, 144, 16, 5, 2, 2, 144),
    (8, 240, 240, 8, 5, 1, 2, 240),
    (8, 672, 672, 4, 5, 1, 2, 672),
    (8, 1152, 1152, 2, 5, 1, 2, 1152),
    (8, 32, 32, 112, 3, 1, 1, 32),
]

torch.manual_seed(0)
print(f"torch {torch.__version__}")
for threads in (1, 2):
    torch.set_num_threads(threads)
    for n in (256, 512, 1024):
        a, b = torch.randn(n, n), torch.randn(n, n)
        print(f"gemm n={n} threads={threads}: {rate(lambda: torch.mm(a, b), 2 * n ** 3):.1f} GFLOP/s")
    for (N, ci, co, H, k, s, p, groups) in CONVS:
        x = torch.randn(N, ci, H, H, requires_grad=True)
        w = torch.randn(co, ci // groups, k, k, requires_grad=True)
        bias = torch.randn(co, requires_grad=True)
        OH = (H + 2 * p - k) // s + 1
        macs = N * co * OH * OH * (ci // groups) * k * k
        fwd = rate(lambda: F.conv2d(x, w, bias, s, p, 1, groups), 2 * macs)
        y = F.conv2d(x, w, bias, s, p, 1, groups)
        g = torch.randn_like(y)
        bwd = rate(lambda: torch.autograd.grad(y, (x, w, bias), g, retain_graph=True), 4 * macs)
        label = f" groups={groups}" if groups > 1 else ""
        print(f"conv N={N} {ci}->{co} {H}x{H} k{k} s{s}{label} threads={threads}: "
              f"fwd {fwd:.1f} bwd {bwd:.1f} GFLOP/s")
