#!/usr/bin/env python3
# Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/): small valid inputs
# and slightly broken ones, so the fuzzers start from every branch of each format. Rerun it after
# changing a format; the files are committed so that scripts/fuzz needs no Python.
import gzip, json, os, struct

here = os.path.dirname(os.path.abspath(__file__))

def put(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

def gz(b):
    return gzip.compress(b, mtime=0)

# IDX: magic 00 00 <type> <ndims>, big-endian u32 dimensions, big-endian elements.
def idx(code, dims, payload):
    return bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload

labels = idx(0x08, [4], bytes([0, 1, 9, 255]))
images = idx(0x08, [2, 2, 3], bytes(range(12)))
for name, data in {
    "labels_u8": labels, "images_u8": images,
    "i8": idx(0x09, [3], bytes([0x80, 0x7F, 0xFF])),
    "i16": idx(0x0B, [2], struct.pack(">hh", -2, 300)),
    "i32": idx(0x0C, [2], struct.pack(">ii", -7, 1 << 30)),
    "f32": idx(0x0D, [1, 2], struct.pack(">ff", 1.5, float("nan"))),
    "f64": idx(0x0E, [2], struct.pack(">dd", -0.0, 1e300)),
    "labels_u8.gz": gz(labels), "images_u8.gz": gz(images),
    "two_members.gz": gz(images[:7]) + gz(images[7:]),
    "bad_truncated": images[:-3], "bad_trailing": labels + b"xy", "bad_magic": b"\x1f\x8bxx" + labels,
    "bad_zero_dim": idx(0x08, [0], b""), "bad_type": idx(0x0A, [1], b"\x01"),
    "bad_dims": idx(0x08, [0xFFFFFFFF, 0xFFFFFFFF], b""),
    "bad_truncated.gz": gz(images)[:-6], "bad_garbage.gz": gz(labels) + b"garbage",
}.items():
    put("idx", name, data)

# safetensors: 8-byte little-endian header length, JSON header, data. The fuzz target also reads
# an input as "header NUL data" (seeds named *.split).
def st(header, data=b"", pad=True):
    h = json.dumps(header, separators=(",", ":")).encode() if not isinstance(header, (bytes, str)) else (
        header.encode() if isinstance(header, str) else header)
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data

good = {"__metadata__": {"format": "pt"},
        "count": {"dtype": "I64", "shape": [], "data_offsets": [0, 8]},
        "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [8, 24]},
        "h": {"dtype": "F16", "shape": [3], "data_offsets": [24, 30]},
        "b": {"dtype": "BF16", "shape": [1], "data_offsets": [30, 32]},
        "u": {"dtype": "U8", "shape": [2, 0], "data_offsets": [32, 32]}}
data = struct.pack("<q", 7) + struct.pack("<4f", 1.5, -2, 0.25, 1e6) + struct.pack("<3H", 0x3C00, 0xC000, 0x3800) + b"\x80\x3f"
put("safetensors", "good", st(good, data))
put("safetensors", "empty", st({}))
put("safetensors", "metadata_only", st({"__metadata__": {"a": "b"}}))
put("safetensors", "f64_i32_extra", st({"d": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8], "x": [[1]]},
                                        "i": {"dtype": "I32", "shape": [1], "data_offsets": [8, 12]}},
                                       struct.pack("<di", 2.5, -1)))
put("safetensors", "good.split", json.dumps(good).encode() + b"\0" + data)
for name, header in {
    "bad_overlap": '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}',
    "bad_hole": '{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}',
    "bad_dup": '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
    "bad_dtype": '{"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}}',
    "bad_shape": '{"a":{"dtype":"F32","shape":[-1, 2.5, "x"],"data_offsets":[0,4]}}',
    "bad_huge": '{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}}',
    "bad_meta": '{"__metadata__":{"k":1,"k":"2"}}',
    "bad_json": '{"a":{"dtype":"U8",',
    "bad_deep": "[" * 200,
}.items():
    put("safetensors", name + ".split", header + "\0xy")
put("safetensors", "bad_length", struct.pack("<Q", 1 << 40) + b"{}")
put("safetensors", "bad_short", b"\x02\x00\x00")

# CLI: the first byte picks the parser (tests/fuzz/fuzz_cli.cpp), arguments are split at newlines.
for name, mode, text in [
    ("bytes", 0, "64M"), ("bytes_frac", 0, "0.5KiB"), ("bytes_bad", 0, "12Q"), ("bytes_exp", 0, "1e3G"),
    ("dtype", 1, "bfloat16"), ("device", 2, "cuda:3"), ("device_bad", 2, "cuda:-1"),
    ("bench_dtype", 3, "uint8"), ("devices", 4, "cpu:4"), ("devices_bad", 4, "cpu:0x"),
    ("train_ddp", 5, "--devices\ncpu:4\n--parallel\nddp\n--batch-size\n64\n--algo\nhier\n--ranks-per-node\n2"),
    ("train_adamw", 5, "--optimizer\nadamw\n--betas\n0.9,0.99\n--eps\n1e-6\n--lr\n3e-4\n--trace-steps\n3:9"),
    ("train_sgd", 5, "--momentum\n0.8\n--no-nesterov\n--lr-schedule\nstep\n--epochs\n3\n--steps\n10"),
    ("train_bad", 5, "--devices\ncuda:0\n--parallel\ndp\n--bucket-mb\n-1\n--threads\nx"),
    ("collective", 6, "all_reduce\nring\nfloat\nsum\n8\n64M\n1M\n2\n4"),
    ("collective_steps", 6, "broadcast\ntree\nbf16\nmax\n1K\n1G\n512K\n0\n3"),
]:
    put("cli", name, bytes([mode]) + text.encode())

# Checkpoints (tests/fuzz/fuzz_checkpoint.cpp): a safetensors file whose metadata holds the run's
# state as JSON strings, as parallel/train/checkpoint.cpp writes it, with tiny tensors; then variants
# with each field out of its range (a record of a rank outside the run, negative or huge steps,
# NaN times), which the reader must refuse.
COLUMNS = ["rank", "epoch", "step", "global_step", "loss", "load_s", "h2d_s", "forward_s", "backward_s",
           "comm_total_s", "comm_exposed_s", "optimizer_s", "wait_s", "step_s", "images", "comm_bytes", "start_s",
           "backward_end_s", "optimizer_step", "loss_scale", "update_skipped"]

def checkpoint(progress=None, ranks=2, records=None, epochs=None):
    progress = progress or {"elapsed_s": 0.5, "epoch": 0, "epoch_loss_sum": 4.0, "global_step": 2, "loss_scale": 0.0,
                            "loss_scale_good_updates": 0, "step": 2}
    records = records if records is not None else [
        [r, 0, s, s, 2.0 + s, 0.001, 0, 0.01, 0.02, 0, 0, 0.001, 0, 0.03, 4, 0, 0.1 * s, 0.05, 1, 0, 0]
        for s in range(2) for r in range(ranks)]
    meta = {"dpx_checkpoint": "1", "dpx_version": "0.1.0", "generator": "dpx",
            "epochs": json.dumps(epochs or []), "options": json.dumps({"--model": "mlp"}),
            "progress": json.dumps(progress), "random_layers": "[]", "ranks": str(ranks),
            "record_columns": json.dumps(COLUMNS)}
    header = {"__metadata__": meta, "model/w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    data = struct.pack("<2f", 0.5, -1.0)
    for r in range(ranks):
        header["random/rank%d" % r] = {"dtype": "I64", "shape": [0, 3], "data_offsets": [len(data), len(data)]}
    header["loader/order"] = {"dtype": "I64", "shape": [3], "data_offsets": [len(data), len(data) + 24]}
    data += struct.pack("<3q", 2, 0, 1)
    flat = [float(v) for row in records for v in row]
    header["records"] = {"dtype": "F64", "shape": [len(records), len(COLUMNS)],
                         "data_offsets": [len(data), len(data) + 8 * len(flat)]}
    data += struct.pack("<%dd" % len(flat), *flat)
    return st(header, data)

def bad_record(column, value):
    rows = [[0, 0, 0, 0, 2.0, 0.001, 0, 0.01, 0.02, 0, 0, 0.001, 0, 0.03, 4, 0, 0.0, 0.05, 1, 0, 0]]
    rows[0][COLUMNS.index(column)] = value
    return checkpoint(ranks=1, records=rows)

put("checkpoint", "good", checkpoint())
put("checkpoint", "one_rank_epochs", checkpoint(ranks=1, epochs=[{"epoch": 0, "eval_s": 0.1, "test_accuracy": 0.5,
                                                                  "test_loss": 1.0, "time_s": 2.0, "train_loss": 1.5}]))
put("checkpoint", "bad_record_rank", bad_record("rank", 5))
put("checkpoint", "bad_record_rank_negative", bad_record("rank", -1))
put("checkpoint", "bad_record_step_nan", bad_record("global_step", float("nan")))
put("checkpoint", "bad_record_time_inf", bad_record("step_s", float("inf")))
put("checkpoint", "bad_progress_negative", checkpoint(progress={"elapsed_s": 0, "epoch": 0, "epoch_loss_sum": 0,
                                                                "global_step": -3, "loss_scale": 0,
                                                                "loss_scale_good_updates": 0, "step": 0}))
put("checkpoint", "bad_ranks_zero", checkpoint(ranks=0, records=[]))
