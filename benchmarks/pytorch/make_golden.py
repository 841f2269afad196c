"""Writes the golden files of dpx's zoo tests (tests/zoo/data/): tiny torchvision Swin and
EfficientNet models (weights as state_dict), a fixed input, their logits, and the gradients of
sum(logits * r) for a fixed r, so the C++ tests compare forward and backward with torchvision.

Run from the repository root with the Python that has torch and torchvision:
    python3 benchmarks/pytorch/make_golden.py [--out tests/zoo/data]
The configurations must match the tiny ones in tests/zoo/test_swin_efficientnet.cpp."""
import argparse
import os
import sys

import torch
from torchvision.models.efficientnet import EfficientNet, MBConvConfig
from torchvision.models.swin_transformer import SwinTransformer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import write_safetensors  # noqa: E402


def golden(model, x, train):
    """logits in eval mode; then gradients (and BN statistics) of one step in `train` mode."""
    model.eval()
    with torch.no_grad():
        logits = model(x)
    r = torch.rand(logits.shape, generator=torch.Generator().manual_seed(1)) * 2 - 1
    model.train(train)
    out = model(x)
    (out * r).sum().backward()
    data = {"input": x, "logits": logits, "r": r, "logits_step": out.detach()}
    for name, p in model.named_parameters():
        data["grad." + name] = p.grad
    if train:  # the running statistics after the one training forward
        for name, b in model.named_buffers():
            if name.endswith("running_mean") or name.endswith("running_var"):
                data["after." + name] = b
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/zoo/data")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)

    # Swin: 20x20 -> 5x5 tokens, padded to 6x6 for 3x3 windows with the shift active; merged
    # (odd size padded) to 3x3, where one window covers all and the shift drops; then to 2x2.
    swin = SwinTransformer(patch_size=[4, 4], embed_dim=8, depths=[2, 2, 1], num_heads=[2, 2, 4],
                           window_size=[3, 3], stochastic_depth_prob=0.0, num_classes=5)
    with torch.no_grad():  # non-zero biases and norms, so every parameter is exercised
        for name, p in swin.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    write_safetensors(os.path.join(args.out, "swin_tiny.safetensors"), swin.state_dict())
    x = torch.randn(2, 3, 20, 20)
    write_safetensors(os.path.join(args.out, "swin_tiny_golden.safetensors"), golden(swin, x, train=False))

    # EfficientNet: expand ratio 1 (no expansion conv), a residual block, kernel 5, stride 2.
    setting = [MBConvConfig(1, 3, 1, 8, 8, 1), MBConvConfig(6, 3, 2, 8, 16, 2), MBConvConfig(4, 5, 2, 16, 24, 1)]
    eff = EfficientNet(setting, dropout=0.0, stochastic_depth_prob=0.0, num_classes=5)
    with torch.no_grad():
        for name, b in eff.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn_like(b) * 0.1)
            elif name.endswith("running_var"):
                b.copy_(torch.rand_like(b) + 0.5)
        for name, p in eff.named_parameters():
            if ".1.weight" in name or ".1.bias" in name:  # batch norm affine parameters
                p.add_(torch.randn_like(p) * 0.1)
    write_safetensors(os.path.join(args.out, "efficientnet_tiny.safetensors"), eff.state_dict())
    x = torch.randn(2, 3, 24, 24)
    write_safetensors(os.path.join(args.out, "efficientnet_tiny_golden.safetensors"), golden(eff, x, train=True))


if __name__ == "__main__":
    main()
