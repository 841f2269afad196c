#!/usr/bin/env python3
"""PyTorch peer of dpx's peak-memory report on the CPU: one torchvision model trained for a few
steps (SGD, Nesterov momentum 0.9, 10 classes, random 3xSxS input, as train_step.py), and the
process's peak resident memory (ru_maxrss) after the steps, less what it was after importing torch
and torchvision: the memory the training needs, net of PyTorch's own import.
Usage: peak_memory.py MODEL BATCH [SIZE=224] [STEPS=2] [THREADS=2]
Prints: model batch size net_peak_mb import_mb"""
import resource
import sys

import torch
import torch.nn as nn
import torchvision


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    model_name, batch = sys.argv[1], int(sys.argv[2])
    size, steps, threads = ([int(x) for x in sys.argv[3:6]] + [224, 2, 2][len(sys.argv[3:6]):])[:3]
    torch.set_num_threads(threads)
    after_import = rss_mb()
    model = getattr(torchvision.models, model_name)(num_classes=10)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, 10, (batch,))
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    print(f"{model_name} {batch} {size} {rss_mb() - after_import:.1f} {after_import:.1f}", flush=True)


if __name__ == "__main__":
    main()
