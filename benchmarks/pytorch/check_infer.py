"""Agreement of dpx's inference with torchvision. Two steps around a dpx run:

  export:  python3 check_infer.py export swin_t --dir DIR [--size 224] [--seed 0]
           builds torchvision.models.<model>() (random init from --seed, batch norm statistics
           calibrated on random batches, eval mode), and writes
           DIR/<model>.safetensors (its state_dict), DIR/<model>.input.safetensors ("input",
           (1, 3, size, size)) and DIR/<model>.logits.safetensors ("logits", torchvision's).
  compare: python3 check_infer.py compare swin_t --dir DIR [--tol 1e-4]
           reads DIR/<model>.dpx_logits.safetensors ("logits", written by dpx from the same
           weights and input) and prints the largest error relative to the largest |logit|;
           exits 1 when it exceeds --tol. Until `dpx infer` writes that file, the zoo suite does
           (swin_t and efficientnet_b0): DPX_TORCHVISION_REFERENCE=DIR <build>/tests/test_zoo
           -tc="*DPX_TORCHVISION_REFERENCE*"

fp32 on the CPU. Needs torch and torchvision; files are written without the safetensors package."""
import argparse
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import read_safetensors, write_safetensors  # noqa: E402


def calibrate_batch_norm(model, size):
    """Sets every batch norm's running statistics to those of random batches (a cumulative
    average over two forwards of 4 images). At initialisation (mean 0, variance 1) deep
    networks such as EfficientNet shrink activations to ~1e-14 in eval mode, which would make
    any comparison of logits meaningless; calibrated statistics keep them O(1), as trained ones do."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(4, 3, size, size))
    for m in bns:
        m.momentum = 0.1


def export(args):
    torch.manual_seed(args.seed)
    model = getattr(torchvision.models, args.model)()
    calibrate_batch_norm(model, args.size)
    model.eval()
    x = torch.randn(1, 3, args.size, args.size)
    with torch.no_grad():
        logits = model(x)
    os.makedirs(args.dir, exist_ok=True)
    base = os.path.join(args.dir, args.model)
    write_safetensors(base + ".safetensors", model.state_dict(), {"format": "pt", "model": args.model})
    write_safetensors(base + ".input.safetensors", {"input": x})
    write_safetensors(base + ".logits.safetensors", {"logits": logits})
    print(f"{args.model}: wrote {base}.{{safetensors,input.safetensors,logits.safetensors}}; "
          f"logits {tuple(logits.shape)}, max |logit| {logits.abs().max().item():.4g}")


def compare(args):
    base = os.path.join(args.dir, args.model)
    ref = read_safetensors(base + ".logits.safetensors")[0]["logits"].double()
    got = read_safetensors(base + ".dpx_logits.safetensors")[0]["logits"].double()
    if got.shape != ref.shape:
        print(f"{args.model}: dpx logits {tuple(got.shape)} but torchvision's {tuple(ref.shape)}")
        return 1
    diff = (got - ref).abs().max().item()
    err = diff / max(ref.abs().max().item(), 1e-30)
    same_top5 = torch.equal(got.topk(5).indices, ref.topk(5).indices)
    print(f"{args.model}: max |dpx - torchvision| = {diff:.3g}, / max |torchvision| = {err:.3g} "
          f"(tolerance {args.tol:g}); top-5 classes {'agree' if same_top5 else 'differ'}")
    return 0 if err <= args.tol else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["export", "compare"])
    ap.add_argument("model", help="a torchvision.models builder: swin_t, efficientnet_b0, resnet50, ...")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    return export(args) if args.step == "export" else compare(args)


if __name__ == "__main__":
    sys.exit(main() or 0)
