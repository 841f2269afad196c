"""Agreement of dpx's inference with torchvision, on the same weights and input.

  run:     python3 check_infer.py run resnet50 --dpx build/bin/dpx [--dir DIR] [--batch 2] [--size 224]
           export (below), then `dpx infer` on the exported weights and input, then compare; one
           line per model with the errors; exit status 1 when one of the first two exceeds --tol.
  export:  python3 check_infer.py export swin_t --dir DIR [--size 224] [--batch 1] [--seed 0]
           builds torchvision.models.<model>() (random init from --seed, batch norm statistics
           calibrated on 8 images, eval mode) and its input: Fashion-MNIST test images as dpx
           feeds them (resized, grey to RGB, normalised), or noise with --input random; writes
           DIR/<model>.safetensors (its state_dict), DIR/<model>.input.safetensors ("input",
           (batch, 3, size, size)) and DIR/<model>.logits.safetensors ("logits", torchvision's).
  compare: python3 check_infer.py compare swin_t --dir DIR [--tol 1e-4]
           reads DIR/<model>.dpx_logits.safetensors ("logits", written by dpx from the same
           weights and input: `dpx infer`, or for swin_t and efficientnet_b0 at batch 1 the zoo
           suite: DPX_TORCHVISION_REFERENCE=DIR <build>/tests/test_zoo -tc="*DPX_TORCHVISION_REFERENCE*").

Errors printed: normwise |dpx - tv|_2 / |tv|_2 and max |dpx - tv| / max |tv| (the gates); the
elementwise max |dpx - tv| / max(|tv|, floor) with floor = 1e-2 max |tv|, so that logits near zero
do not turn rounding into huge ratios; and both engines' normwise errors against torchvision's
float64 logits (information: how much of the disagreement is fp32 rounding). fp32 on the CPU.
MODEL `all` runs every model of the issue in turn and ends with a one-line-per-model summary. Needs torch and torchvision; files are written without the safetensors package (st_io.py)."""
import argparse
import gzip
import os
import subprocess
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import read_safetensors, write_safetensors  # noqa: E402


def fashion_mnist_images(count, size):
    """The first `count` Fashion-MNIST test images as dpx's loader feeds an RGB model: scaled to
    [0, 1], resized bilinearly to size x size, grey copied to three channels, normalised with the
    data set's mean and standard deviation (0.2860, 0.3530). Read from $DPX_DATA_DIR or the Debian
    package's folder."""
    folder = os.environ.get("DPX_DATA_DIR") or "/usr/share/datasets/fashion-mnist"
    path = os.path.join(folder, "t10k-images-idx3-ubyte.gz")
    if not os.path.exists(path):
        sys.exit(f"{path} not found: install dataset-fashion-mnist, set DPX_DATA_DIR, or use --input random")
    with gzip.open(path) as f:
        raw = f.read(16 + count * 28 * 28)[16:]
    x = torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(count, 1, 28, 28).float() / 255
    x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return ((x - 0.2860) / 0.3530).repeat(1, 3, 1, 1).contiguous()


def make_inputs(kind, batch, size):
    """(calibration batch of 8, input batch): Fashion-MNIST images (the default: 28x28 grey
    images resized as the measurement studies fed MNIST to these models, docs/ARCHITECTURE.md,
    Studies) or standard normal noise."""
    if kind == "random":
        return torch.randn(8, 3, size, size), torch.randn(batch, 3, size, size)
    images = fashion_mnist_images(8 + batch, size)
    return images[batch:], images[:batch]


def calibrate_batch_norm(model, images):
    """Sets every batch norm's running statistics to those of `images` (one forward in train
    mode, cumulative average). At initialisation (mean 0, variance 1) deep networks such as
    EfficientNet shrink activations to ~1e-14 in eval mode, which would make any comparison of
    logits meaningless; calibrated statistics keep them O(1), as trained ones do."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        model(images)
    for m in bns:
        m.momentum = 0.1


def export(args):
    torch.manual_seed(args.seed)
    model = getattr(torchvision.models, args.model)()
    calibration, x = make_inputs(args.input, args.batch, args.size)
    calibrate_batch_norm(model, calibration)
    model.eval()
    with torch.no_grad():
        logits = model(x)
    os.makedirs(args.dir, exist_ok=True)
    base = os.path.join(args.dir, args.model)
    write_safetensors(base + ".safetensors", model.state_dict(), {"format": "pt", "model": args.model})
    write_safetensors(base + ".input.safetensors", {"input": x})
    # The same weights and input in float64: the exact logits, to tell fp32 rounding (which deep
    # random networks amplify) from disagreement.
    with torch.no_grad():
        exact = model.double()(x.double())
    write_safetensors(base + ".logits.safetensors", {"logits": logits, "logits_fp64": exact})
    print(f"{args.model}: wrote {base}.{{safetensors,input.safetensors,logits.safetensors}}; "
          f"logits {tuple(logits.shape)}, max |logit| {logits.abs().max().item():.4g}")


def errors(got, ref):
    """(normwise, max over the largest reference, elementwise with a floor of 1 % of it)."""
    diff = (got - ref).abs()
    scale = max(ref.abs().max().item(), 1e-30)
    normwise = (got - ref).norm().item() / max(ref.norm().item(), 1e-30)
    elementwise = (diff / ref.abs().clamp(min=1e-2 * scale)).max().item()
    return normwise, diff.max().item() / scale, elementwise


def compare(args):
    base = os.path.join(args.dir, args.model)
    refs = read_safetensors(base + ".logits.safetensors")[0]
    ref = refs["logits"].double()
    got = read_safetensors(base + ".dpx_logits.safetensors")[0]["logits"].double()
    if got.shape != ref.shape:
        print(f"{args.model}: dpx logits {tuple(got.shape)} but torchvision's {tuple(ref.shape)}")
        return 1
    normwise, vs_max, elementwise = errors(got, ref)
    same_top5 = torch.equal(got.topk(5).indices, ref.topk(5).indices)
    print(f"{args.model}: logits {tuple(ref.shape)}, max |tv| {ref.abs().max().item():.3g}; dpx vs torchvision: "
          f"normwise {normwise:.2e}, max / max |tv| {vs_max:.2e}, elementwise (floor 1 %) {elementwise:.2e}; "
          f"top-5 classes {'agree' if same_top5 else 'differ'}")
    ok = max(normwise, vs_max) <= args.tol
    if "logits_fp64" in refs:
        # The same weights and input in float64 tell fp32 rounding from disagreement: deep networks
        # on noise amplify rounding (resnet152 on --input random: torchvision fp32 is 3e-4 from
        # float64), and then no fp32 engine can agree with another one to 1e-4.
        exact = refs["logits_fp64"]
        dpx_err, tv_err = errors(got, exact)[0], errors(ref, exact)[0]
        print(f"{args.model}: against float64 logits, normwise: dpx {dpx_err:.2e}, torchvision fp32 {tv_err:.2e}")
    print(f"{args.model}: {'PASS' if ok else 'FAIL'} (tolerance {args.tol:g})")
    return 0 if ok else 1


def run(args):
    if not args.dpx:
        sys.exit("run needs --dpx PATH (the dpx binary, e.g. build/bin/dpx)")
    export(args)
    base = os.path.join(args.dir, args.model)
    cmd = [args.dpx, "infer", "--model", args.model, "--weights", base + ".safetensors", "--input",
           base + ".input.safetensors", "--output", base + ".dpx_logits.safetensors"]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"{args.model}: dpx infer failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        return 1
    print(f"{args.model}: dpx infer took {time.perf_counter() - t:.1f} s (building the model included)")
    return compare(args)


# Every torchvision model dpx's zoo builds.
ALL_MODELS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vgg11", "vgg11_bn", "vgg13",
              "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn", "alexnet", "densenet121", "densenet161",
              "densenet169", "densenet201", "squeezenet1_0", "squeezenet1_1", "swin_t", "swin_s", "swin_b",
              "efficientnet_b0"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["run", "export", "compare"])
    ap.add_argument("model", help="a torchvision.models builder (resnet50, vgg16_bn, densenet121, swin_t, ...) or all")
    ap.add_argument("--dir", default="out/check_infer")
    ap.add_argument("--dpx", help="the dpx binary (run)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=None, help="images (run: 2, export: 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--input", choices=["fashion-mnist", "random"], default="fashion-mnist",
                    help="images for the input and the batch norm calibration (default fashion-mnist)")
    ap.add_argument("--threads", type=int, default=0, help="threads for dpx infer (0: every core)")
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    if args.batch is None:
        args.batch = 2 if args.step == "run" else 1
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    step = {"run": run, "export": export, "compare": compare}[args.step]
    if args.model != "all":
        return step(args)
    failed = []
    for model in ALL_MODELS:
        args.model = model
        if step(args):
            failed.append(model)
    print(f"all: {len(ALL_MODELS) - len(failed)} of {len(ALL_MODELS)} models pass"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main() or 0)
