#!/usr/bin/env python3
"""Golden values of torch.optim.AdamW (single-tensor path, foreach=False) for dpx's AdamW tests
(tests/kernels/test_adamw.cpp): five steps on a fixed fp32 tensor with fixed gradients, for two
settings, printing the parameters after every step and the final moments as C++ initialisers.

Run from the repository root with Debian's python3-torch:
    /usr/bin/python3 benchmarks/pytorch/adamw_golden.py
The tensor, gradients and settings must match kParam, kGrads and the golden test case there."""
import torch

PARAM = [1.0, -2.0, 0.5, 3.0, -0.25, 0.0]
# One row per step. The zero in column 5 of step 1 leaves that moment at 0 for a step: there the
# update is m / (0 + eps) = 0 / eps, still 0, while weight decay alone moves the parameter.
GRADS = [
    [0.5, 1.0, -0.2, 0.0, 4.0, 0.0],
    [-0.3, 0.2, 0.4, 1e-3, -4.0, 0.5],
    [0.1, -0.4, 0.0, 2.0, 3.5, -0.5],
    [0.7, 0.3, -0.6, -1e-4, 0.0, 1.0],
    [-0.2, 0.9, 0.25, 0.5, -1.0, 0.0],
]
CASES = [  # name, AdamW keyword arguments
    ("torch_defaults", dict()),  # lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2
    ("strong_decay", dict(lr=0.1, betas=(0.8, 0.95), eps=1e-3, weight_decay=0.5)),
]


def floats(t):
    return "{" + ", ".join(f"{v:.9g}" for v in t.tolist()) + "}"


print(f"// torch {torch.__version__}")
for name, kwargs in CASES:
    p = torch.nn.Parameter(torch.tensor(PARAM, dtype=torch.float32))
    opt = torch.optim.AdamW([p], foreach=False, **kwargs)
    print(f"// {name}: {kwargs}")
    for g in GRADS:
        p.grad = torch.tensor(g, dtype=torch.float32)
        opt.step()
        print(floats(p.detach()) + ",")
    state = opt.state[p]
    print("// exp_avg " + floats(state["exp_avg"]))
    print("// exp_avg_sq " + floats(state["exp_avg_sq"]))
