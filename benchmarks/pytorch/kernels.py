#!/usr/bin/env python3
"""PyTorch (CPU) peer of benchmarks/bench_kernels.cpp: the same GEMM and conv2d shapes at 1 and
2 threads, GFLOP/s with 2 FLOPs per multiply-add (conv backward = dx + dW + db = 2x forward).
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


CONVS = [  # N, C_in, C_out, H, k, stride, pad — as in bench_kernels.cpp
    (8, 64, 64, 56, 3, 1, 1),
    (8, 128, 128, 28, 3, 1, 1),
    (2, 3, 64, 224, 7, 2, 3),
    (8, 256, 64, 56, 1, 1, 0),
]

torch.manual_seed(0)
print(f"torch {torch.__version__}")
for threads in (1, 2):
    torch.set_num_threads(threads)
    for n in (256, 512, 1024):
        a, b = torch.randn(n, n), torch.randn(n, n)
        print(f"gemm n={n} threads={threads}: {rate(lambda: torch.mm(a, b), 2 * n ** 3):.1f} GFLOP/s")
    for (N, ci, co, H, k, s, p) in CONVS:
        x = torch.randn(N, ci, H, H, requires_grad=True)
        w = torch.randn(co, ci, k, k, requires_grad=True)
        bias = torch.randn(co, requires_grad=True)
        OH = (H + 2 * p - k) // s + 1
        macs = N * co * OH * OH * ci * k * k
        fwd = rate(lambda: F.conv2d(x, w, bias, s, p), 2 * macs)
        y = F.conv2d(x, w, bias, s, p)
        g = torch.randn_like(y)
        bwd = rate(lambda: torch.autograd.grad(y, (x, w, bias), g, retain_graph=True), 4 * macs)
        print(f"conv N={N} {ci}->{co} {H}x{H} k{k} s{s} threads={threads}: fwd {fwd:.1f} bwd {bwd:.1f} GFLOP/s")
