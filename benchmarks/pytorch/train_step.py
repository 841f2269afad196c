#!/usr/bin/env python3
"""PyTorch (CPU) peer of `dpx bench --parallel none`: one torchvision model, the same batch, input
size and optimiser (SGD, Nesterov momentum 0.9), mean forward / backward / optimizer milliseconds
per step after warm-up, and images/s.
Usage: /usr/bin/python3 benchmarks/pytorch/train_step.py MODEL [batch=8] [size=64] [steps=10] [threads=2]"""
import sys
import time

import torch
import torch.nn as nn
import torchvision


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    name = sys.argv[1]
    batch, size, steps, threads = (int(a) for a in (sys.argv[2:] + ["8", "64", "10", "2"][len(sys.argv) - 2:])[:4])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    model.train()
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, 10, (batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    loss_fn = nn.CrossEntropyLoss()
    fwd = bwd = upd = 0.0
    warmup = 2
    for s in range(steps + warmup):
        t0 = time.perf_counter()
        loss = loss_fn(model(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        t3 = time.perf_counter()
        if s >= warmup:
            fwd, bwd, upd = fwd + t1 - t0, bwd + t2 - t1, upd + t3 - t2
    total = fwd + bwd + upd
    print(f"torch {torch.__version__} {name} batch {batch} {size}x{size} threads {threads}: "
          f"forward {fwd / steps * 1e3:.2f} ms, backward {bwd / steps * 1e3:.2f} ms, "
          f"optimizer {upd / steps * 1e3:.2f} ms, {batch * steps / total:.1f} img/s")


if __name__ == "__main__":
    main()
