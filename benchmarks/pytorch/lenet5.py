#!/usr/bin/env python3
"""PyTorch (CPU) peer of `dpx bench --models lenet5`: the same LeNet-5 (zoo/small.cpp: batch norm,
ReLU, max-pooling, padded 5x5 convolutions) on 1x28x28 inputs, SGD with Nesterov momentum; mean
forward, backward and optimizer milliseconds per step and images/s at 1 and 2 threads.
Usage: /usr/bin/python3 benchmarks/pytorch/lenet5.py [batch=64] [steps=100]"""
import sys
import time

import torch
import torch.nn as nn


def lenet5(classes=10):
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5, padding=2), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, classes))


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    torch.manual_seed(0)
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    print(f"torch {torch.__version__}, lenet5, batch {batch}, {steps} steps after 5 warm-up")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        model = lenet5()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
        loss_fn = nn.CrossEntropyLoss()
        fwd = bwd = upd = 0.0
        for s in range(steps + 5):
            t0 = time.perf_counter()
            loss = loss_fn(model(x), y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            opt.zero_grad()
            t3 = time.perf_counter()
            if s >= 5:
                fwd, bwd, upd = fwd + t1 - t0, bwd + t2 - t1, upd + t3 - t2
        total = fwd + bwd + upd
        print(f"threads {threads}: forward {fwd / steps * 1e3:.2f} ms, backward {bwd / steps * 1e3:.2f} ms, "
              f"optimizer {upd / steps * 1e3:.2f} ms, {batch * steps / total:.0f} img/s")


if __name__ == "__main__":
    main()
