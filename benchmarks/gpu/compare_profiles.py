#!/usr/bin/env python3
"""dpx's per-op GPU profile against PyTorch's, one table per model and precision (Markdown).

Usage: compare_profiles.py PROFILE_DPX.csv PROFILE_TORCH.csv [--top 5] [--dpx-log LOG ...]
  PROFILE_DPX.csv    scripts/gpu's profile-dpx.csv (dpx bench --profile-ops rows with precision first)
  PROFILE_TORCH.csv  scripts/gpu's profile-torch.csv (benchmarks/pytorch/profile_step.py)
  --dpx-log LOG      a `dpx bench --profile-ops` log whose op tables stand in for missing CSV rows
                     (a run cut before its CSV was copied), with --dpx-log-precision P (bf16)

The two engines name their ops differently, so both are summed into the same kinds of work (the
CATEGORIES below: convolution forward, convolution backward, batch norm, ...); dpx's time per op is
the device time between CUDA events recorded around it (since 26a9103; profiles before it waited
for the stream around each op, adding its launches), PyTorch's is each aten op's own device time
(kernels only). Per model, the table lists every kind with both
engines' ms per step and dpx's excess, largest first; the first --top rows are where dpx loses most.
Beside them, the host time each engine spent issuing that kind of work (dpx: host_ms_per_step of
its ops; PyTorch: each aten op's own host time), where the CSVs have it. An op that reads a result
on the host waits there for the GPU to finish everything queued before it: dpx's count_nonfinite
(the divergence guard, before the optimizer) spends the host's lead on the GPU waiting, so its host
time is that wait, not work; the summary line says it apart.

Where both CSVs have shapes (dpx bench --profile-shapes, profile_step.py --shapes: scripts/gpu's
profile stage since 2026-11-28), a second table per model lists its convolutions by shape — the
input's and the weight's, which both engines record — with each engine's forward and backward ms
per step, where dpx loses most first (--top-shapes rows): which layer of a kind loses, a depthwise
one or a pointwise one, for work without a GPU. An op's rows of several shapes are summed for the
first table.
"""
import argparse
import collections
import csv
import json
import re
import sys

# (kind, dpx ops, PyTorch ops). An op named in no kind is "other".
CATEGORIES = [
    ("convolution forward", {"conv2d_forward"},
     {"aten::cudnn_convolution", "aten::_conv_depthwise2d", "aten::cudnn_convolution_relu",
      "aten::cudnn_convolution_add_relu", "aten::_convolution", "aten::convolution", "aten::conv2d",
      "aten::mkldnn_convolution", "aten::_slow_conv2d_forward", "aten::thnn_conv2d"}),
    ("convolution backward", {"conv2d_backward"},
     {"aten::convolution_backward", "aten::_conv_depthwise2d_backward", "aten::_slow_conv2d_backward",
      "aten::mkldnn_convolution_backward"}),
    # increment_i64 was batch norm's num_batches_tracked before 2026-11-29 (profiles of 11-26 to
    # 11-28); since, batch_norm_forward_train counts it, and increment_i64 is a CUDA graph's step count.
    ("batch norm", {"batch_norm_forward_train", "batch_norm_backward", "increment_i64"},
     {"aten::cudnn_batch_norm", "aten::cudnn_batch_norm_backward", "aten::native_batch_norm",
      "aten::native_batch_norm_backward", "aten::_batch_norm_impl_index"}),
    ("activations", {"relu_forward", "relu_backward", "silu_forward", "silu_backward", "sigmoid_forward",
                     "sigmoid_backward", "gelu_forward", "gelu_backward"},
     {"aten::relu_", "aten::relu", "aten::clamp_min_", "aten::clamp_min", "aten::threshold_backward",
      "aten::silu_", "aten::silu", "aten::silu_backward", "aten::sigmoid", "aten::sigmoid_backward", "aten::gelu",
      "aten::gelu_backward", "aten::hardtanh_", "aten::hardtanh_backward"}),
    ("pooling", {"max_pool2d_forward", "max_pool2d_backward", "avg_pool2d_forward", "avg_pool2d_backward",
                 "adaptive_avg_pool2d_forward", "adaptive_avg_pool2d_backward"},
     {"aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward", "aten::avg_pool2d",
      "aten::avg_pool2d_backward", "aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d_backward",
      "aten::mean", "aten::adaptive_avg_pool2d"}),
    ("linear and matmul", {"linear_forward", "linear_backward", "matmul", "matmul_backward"},
     {"aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm"}),
    ("concatenation and layout", {"concat_channels", "split_channels_backward", "copy_channels", "permute",
                                  "permute_backward", "roll", "roll_backward", "pad_hw", "pad_hw_backward",
                                  "window_partition", "window_merge", "index_select", "index_select_backward",
                                  "copy"},
     {"aten::cat", "aten::roll", "aten::index", "aten::_index_put_impl_", "aten::index_put_", "aten::copy_",
      "aten::clone", "aten::contiguous", "aten::constant_pad_nd", "aten::narrow"}),
    ("norms, softmax, dropout, loss", {"layer_norm_forward", "layer_norm_backward", "softmax_forward",
                                        "softmax_backward", "dropout_forward", "dropout_backward",
                                        "cross_entropy_forward", "cross_entropy_backward"},
     {"aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::_softmax",
      "aten::_softmax_backward_data", "aten::native_dropout", "aten::native_dropout_backward", "aten::bernoulli_",
      "aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_forward",
      "aten::nll_loss_backward", "aten::masked_fill_"}),
    ("elementwise and sums", {"add", "add_relu", "axpy", "mul_broadcast", "mul_broadcast_backward", "add_broadcast",
                              "add_broadcast_backward", "fill"},
     {"aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::div", "aten::div_", "aten::sub", "aten::fill_",
      "aten::zero_", "aten::sum", "aten::remainder", "aten::ne", "aten::eq", "aten::arange", "aten::where"}),
    ("optimizer", {"sgd_step", "count_nonfinite"},
     {"aten::_foreach_mul_", "aten::_foreach_add_", "aten::_foreach_addcmul_", "aten::_foreach_lerp_",
      "aten::_foreach_sqrt", "aten::_foreach_div_", "aten::_fused_sgd_"}),
]
SKIP_TORCH = {"Activity Buffer Request", "(step)"}


def kind_of(op, engine):
    for kind, dpx_ops, torch_ops in CATEGORIES:
        if op in (dpx_ops if engine == "dpx" else torch_ops):
            return kind
    return "other"


def model_of(configuration):
    """The model of a dpx bench configuration tag: MODEL_b64_none_cuda1 -> MODEL."""
    m = re.fullmatch(r"(.+)_b\d+_[^_]+_[^_]+", configuration)
    return m.group(1) if m else configuration


def read_dpx(path, host=None):
    """{(model, precision): {op: ms_per_step}} from profile-dpx.csv (configuration = MODEL_b64_...);
    with `host` (a dict), also {(model, precision): {op: host_ms_per_step}} into it. scripts/gpu
    wrote a ten-column header over rows of twelve before 2026-11-27 evening: the host column is
    then the first of the unnamed extras."""
    out = collections.defaultdict(dict)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            model = model_of(row["configuration"])
            by_op = out[(model, row["precision"])]
            by_op[row["op"]] = by_op.get(row["op"], 0.0) + float(row["ms_per_step"])  # summed over shapes
            host_ms = row.get("host_ms_per_step") or (row.get(None) or [""])[0]
            if host is not None and host_ms not in ("", None):
                by_op = host.setdefault((model, row["precision"]), {})
                by_op[row["op"]] = by_op.get(row["op"], 0.0) + float(host_ms)
    return out


TENSOR = re.compile(r"-|\d+(x\d+)*")
# Where the input and the weight stand among an op's tensors: dpx's conv2d_forward(y, x, w, b) and
# conv2d_backward(dx, dw, db, dy, x, w); PyTorch's convolution ops (input, weight, ...) and
# convolution_backward(grad_output, input, weight, ...).
DPX_CONV = {"conv2d_forward": ("forward", 1), "conv2d_backward": ("backward", 4)}
TORCH_CONV_FORWARD = next(t for k, _, t in CATEGORIES if k == "convolution forward")
TORCH_CONV_BACKWARD = next(t for k, _, t in CATEGORIES if k == "convolution backward")


def new_conv():
    return {"dpx forward": 0.0, "dpx backward": 0.0, "PyTorch forward": 0.0, "PyTorch backward": 0.0, "params": ""}


def read_dpx_convs(path):
    """{(model, precision): {(x shape, w shape): new_conv()}} from the rows of profile-dpx.csv that have
    a shape (dpx bench --profile-shapes); {} without them."""
    out = collections.defaultdict(lambda: collections.defaultdict(new_conv))
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["op"] not in DPX_CONV or not row.get("shape"):
                continue
            model = model_of(row["configuration"])
            words = row["shape"].split()
            tensors = [w for w in words if TENSOR.fullmatch(w)]
            params = " ".join(w for w in words if not TENSOR.fullmatch(w))
            direction, at = DPX_CONV[row["op"]]
            if len(tensors) < at + 2:
                continue
            conv = out[(model, row["precision"])][(tensors[at], tensors[at + 1])]
            conv["dpx " + direction] += float(row["ms_per_step"])
            conv["params"] = params
    return out


def read_torch_convs(path):
    """The same from profile-torch.csv's rows with a shape (profile_step.py --shapes)."""
    out = collections.defaultdict(lambda: collections.defaultdict(new_conv))
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            op = row["op"]
            if not row.get("shape") or (op not in TORCH_CONV_FORWARD and op not in TORCH_CONV_BACKWARD):
                continue
            shapes = json.loads(row["shape"])
            at = 1 if op in TORCH_CONV_BACKWARD else 0
            if len(shapes) < at + 2 or not shapes[at] or not shapes[at + 1]:
                continue
            key = tuple("x".join(str(d) for d in s) for s in shapes[at:at + 2])
            direction = "backward" if at else "forward"
            out[(row["model"], row["precision"])][key]["PyTorch " + direction] += float(row["gpu_ms_per_step"])
    return out


def conv_table(key, dpx_convs, torch_convs, top):
    """The convolutions of one model by (input, weight) shape, where dpx loses most first."""
    shapes = set(dpx_convs) | set(torch_convs)
    rows = []
    for shape in shapes:
        d, t = dpx_convs.get(shape, new_conv()), torch_convs.get(shape, new_conv())
        dpx_ms = d["dpx forward"] + d["dpx backward"]
        torch_ms = t["PyTorch forward"] + t["PyTorch backward"]
        rows.append((dpx_ms - torch_ms, shape, d, t))
    rows.sort(key=lambda r: r[0], reverse=True)
    model, precision = key
    lines = [f"Convolutions of {model}, {precision}, by shape (the {min(top, len(rows))} of {len(rows)} where dpx loses "
             "most; ms per step, summed over the layers of that shape):", "",
             "| input | weight | dpx's parameters | dpx forward | PyTorch forward | dpx backward | PyTorch backward "
             "| dpx − PyTorch |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for excess, (x, w), d, t in rows[:top]:
        lines.append(f"| {x} | {w} | {d['params'] or '?'} | {d['dpx forward']:.2f} | {t['PyTorch forward']:.2f} | "
                     f"{d['dpx backward']:.2f} | {t['PyTorch backward']:.2f} | {excess:+.2f} |")
    lines.append("")
    return lines


def read_dpx_log(path, precision, out):
    """The op tables of a `dpx bench --profile-ops` log: '[i/n] MODEL batch ...' then rows
    'op calls total_ms ms_per_step % gflops'."""
    model = None
    with open(path) as f:
        for line in f:
            m = re.match(r"\[\d+/\d+\] (\S+) batch", line)
            if m:
                model = m.group(1)
                continue
            parts = line.split()
            if model and len(parts) >= 5 and re.fullmatch(r"[a-z0-9_]+", parts[0]) and parts[1].isdigit():
                try:
                    out[(model, precision)][parts[0]] = float(parts[3])
                except ValueError:
                    pass
    return out


def read_torch(path, host=None):
    """({(model, precision): {op: gpu_ms_per_step}}, {(model, precision): (kernels, kernel_ms, wall_ms)});
    with `host` (a dict), also {(model, precision): {op: host_ms_per_step}} of every op into it."""
    ops = collections.defaultdict(dict)
    steps = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["model"], row["precision"])
            if row["op"] == "(step)":
                steps[key] = (float(row["kernels_per_step"]), float(row["gpu_ms_per_step"]), float(row["host_ms_per_step"]))
                continue
            if row["op"] in SKIP_TORCH:
                continue
            if host is not None and row.get("host_ms_per_step"):
                by_op = host.setdefault(key, {})
                by_op[row["op"]] = by_op.get(row["op"], 0.0) + float(row["host_ms_per_step"])
            if float(row["gpu_ms_per_step"]) > 0:
                ops[key][row["op"]] = ops[key].get(row["op"], 0.0) + float(row["gpu_ms_per_step"])
    return ops, steps


def table(key, dpx_ops, torch_ops, torch_step, top, dpx_host=None, torch_host=None):
    by_kind = collections.defaultdict(lambda: [0.0, 0.0, collections.Counter(), collections.Counter()])
    host_kind = collections.defaultdict(lambda: [0.0, 0.0])
    for op, ms in (dpx_host or {}).items():
        host_kind[kind_of(op, "dpx")][0] += ms
    for op, ms in (torch_host or {}).items():
        host_kind[kind_of(op, "torch")][1] += ms
    for op, ms in dpx_ops.items():
        k = by_kind[kind_of(op, "dpx")]
        k[0] += ms
        k[2][op] += ms
    for op, ms in torch_ops.items():
        k = by_kind[kind_of(op, "torch")]
        k[1] += ms
        k[3][op] += ms
    rows = sorted(by_kind.items(), key=lambda kv: kv[1][0] - kv[1][1], reverse=True)
    model, precision = key
    total_d = sum(v[0] for v in by_kind.values())
    total_t = sum(v[1] for v in by_kind.values())
    lines = [f"#### {model}, {precision}", ""]
    if torch_step:
        lines.append(f"dpx's ops: {total_d:.1f} ms per step (CUDA events around each op); PyTorch's kernels: {total_t:.1f} ms "
                     f"per step, {torch_step[0]:.0f} kernels, {torch_step[2]:.1f} ms wall under the profiler.")
        lines.append("")
    with_host = bool(dpx_host) and bool(torch_host)
    if with_host:
        hd, ht = sum(v[0] for v in host_kind.values()), sum(v[1] for v in host_kind.values())
        wait = (dpx_host or {}).get("count_nonfinite", 0.0)
        lines.append(f"Host time in the ops: dpx {hd:.1f} ms per step ({wait:.1f} of them waiting for the GPU in "
                     f"count_nonfinite), PyTorch {ht:.1f} (its aten ops' own host time).")
        lines.append("")
    host_head = " dpx host ms | PyTorch host ms |" if with_host else ""
    lines.append("| kind of work | dpx ms | PyTorch ms | dpx − PyTorch |" + host_head + " dpx's largest ops | PyTorch's largest ops |")
    lines.append("| --- | --- | --- | --- |" + (" --- | --- |" if with_host else "") + " --- | --- |")
    for i, (kind, (d, t, dops, tops)) in enumerate(rows):
        mark = "**" if i < top and d - t > 0.05 else ""
        names_d = ", ".join(f"{o} {v:.2f}" for o, v in dops.most_common(2))
        names_t = ", ".join(f"{o.replace('aten::', '')} {v:.2f}" for o, v in tops.most_common(2))
        host_cells = f" {host_kind[kind][0]:.2f} | {host_kind[kind][1]:.2f} |" if with_host else ""
        lines.append(f"| {mark}{kind}{mark} | {d:.2f} | {t:.2f} | {d - t:+.2f} |{host_cells} {names_d} | {names_t} |")
    lines.append("")
    return lines


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("dpx_csv")
    ap.add_argument("torch_csv")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--top-shapes", type=int, default=8)
    ap.add_argument("--dpx-log", action="append", default=[])
    ap.add_argument("--dpx-log-precision", default="bf16")
    args = ap.parse_args()
    dpx_host, torch_host = {}, {}
    dpx = read_dpx(args.dpx_csv, dpx_host)
    for log in args.dpx_log:
        read_dpx_log(log, args.dpx_log_precision, dpx)
    torch_ops, torch_steps = read_torch(args.torch_csv, torch_host)
    dpx_convs, torch_convs = read_dpx_convs(args.dpx_csv), read_torch_convs(args.torch_csv)
    keys = sorted(set(dpx) | set(torch_ops), key=lambda k: (["fp32", "tf32", "bf16"].index(k[1])
                                                              if k[1] in ("fp32", "tf32", "bf16") else 9, k[0]))
    out = []
    for key in keys:
        if key not in dpx or key not in torch_ops:
            missing = "dpx" if key not in dpx else "PyTorch"
            out += [f"#### {key[0]}, {key[1]}", "", f"({missing}'s profile did not run.)", ""]
            continue
        out += table(key, dpx[key], torch_ops[key], torch_steps.get(key), args.top, dpx_host.get(key),
                     torch_host.get(key))
        if dpx_convs.get(key) and torch_convs.get(key):
            out += conv_table(key, dpx_convs[key], torch_convs[key], args.top_shapes)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
