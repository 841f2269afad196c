// dpx infer's inputs (see infer_input.hpp): each file known by its first bytes, not its name.
#include "tools/infer_input.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/data/idx.hpp"
#include "core/data/image_transforms.hpp"
#include "core/data/transforms.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/safetensors.hpp"
#include "tools/image_flags.hpp"

namespace dpx::tools {

namespace {

enum class Kind { safetensors, idx, image };

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) usage_fail("--input '", path, "': cannot be opened (", std::strerror(errno), ")");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

Kind kind_of(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    usage_fail("--input '", path, "' is a folder: pass its JPEG/PNG files (--input ", path, "/*.jpg, or a comma "
               "list), or make one safetensors file of a folder's images with dpx data preview --tensors");
  std::ifstream in(path, std::ios::binary);
  if (!in) usage_fail("--input '", path, "': cannot be opened (", std::strerror(errno), ")");
  std::array<uint8_t, 9> h{};
  in.read(reinterpret_cast<char*>(h.data()), h.size());
  const auto n = static_cast<size_t>(in.gcount());
  if (n >= 3 && h[0] == 0xFF && h[1] == 0xD8 && h[2] == 0xFF) return Kind::image;         // JPEG
  if (n >= 4 && h[0] == 0x89 && h[1] == 'P' && h[2] == 'N' && h[3] == 'G') return Kind::image;  // PNG
  if (n >= 2 && h[0] == 0x1F && h[1] == 0x8B) return Kind::idx;                             // gzip: IDX
  if (n >= 4 && h[0] == 0 && h[1] == 0 && h[3] >= 1 && h[3] <= 4) return Kind::idx;          // IDX magic
  if (looks_like_safetensors(path)) return Kind::safetensors;
  usage_fail("--input '", path, "': neither a safetensors file, an IDX images file (the MNIST format) nor a JPEG or "
             "PNG image; pass one of those");
}

// The mean and std for `channels` input channels (see infer_input.hpp), and where they came from.
struct Stats {
  std::vector<float> mean, std;
  std::string from;
};
Stats stats_for(const InferInputOptions& o, int channels) {
  Stats s;
  if (!o.mean.empty() || !o.std.empty()) {
    if (o.mean.empty() || o.std.empty()) usage_fail("--mean and --std go together: pass both");
    s = {o.mean, o.std, "--mean/--std"};
  } else if (!o.meta_mean.empty() && !o.meta_std.empty()) {
    s = {parse_floats(o.meta_mean, "the weights' metadata mean"), parse_floats(o.meta_std, "the weights' metadata std"),
         "the weights' data set"};
  } else if (channels == 3) {
    s = {{data::kImageNetMean.begin(), data::kImageNetMean.end()},
         {data::kImageNetStd.begin(), data::kImageNetStd.end()},
         "ImageNet's (torchvision's weights)"};
  } else {
    usage_fail("--input: ", channels, "-channel pixels to normalise, and the weights' metadata names no mean and std "
               "(dpx train --save writes them): pass --mean and --std (Fashion-MNIST: 0.2860 and 0.3530; MNIST: "
               "0.1307 and 0.3081), or --normalize no");
  }
  if (s.mean.size() != s.std.size())
    usage_fail(s.from, ": ", s.mean.size(), " mean value(s) but ", s.std.size(), " std value(s)");
  if (s.mean.size() == 1 && channels > 1) {
    s.mean.assign(static_cast<size_t>(channels), s.mean[0]);
    s.std.assign(static_cast<size_t>(channels), s.std[0]);
  }
  if (static_cast<int>(s.mean.size()) != channels)
    usage_fail(s.from, ": ", s.mean.size(), " mean and std values for ", channels, "-channel images; pass 1 or ",
               channels);
  for (float v : s.std)
    if (!(v > 0) || !std::isfinite(v)) usage_fail(s.from, ": std ", v, " is not a positive number");
  return s;
}

std::string stats_text(const Stats& s) {
  std::ostringstream os;
  os << "normalised with mean ";
  for (size_t i = 0; i < s.mean.size(); ++i) os << (i ? "," : "") << s.mean[i];
  os << " and std ";
  for (size_t i = 0; i < s.std.size(); ++i) os << (i ? "," : "") << s.std[i];
  os << " (" << s.from << ")";
  return os.str();
}

// (x - mean[c]) / std[c] in place over (N, C, H, W) f32.
void normalise(Tensor& x, const Stats& s) {
  float* p = x.data<float>();
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k) {
      float* q = p + (i * c + k) * hw;
      for (int64_t j = 0; j < hw; ++j) q[j] = (q[j] - s.mean[static_cast<size_t>(k)]) / s.std[static_cast<size_t>(k)];
    }
}

bool normalises(const InferInputOptions& o, bool pixels) {
  return o.normalize == Normalize::yes || (o.normalize == Normalize::automatic && pixels);
}

InferInput from_safetensors(const InferInputOptions& o) {
  const std::string& path = o.paths.front();
  SafeTensors file = read_safetensors(path);
  const Tensor* t = nullptr;
  std::string name = o.tensor_name;
  if (name.empty()) {
    if (file.tensors.empty()) usage_fail(path, ": the file holds no tensors; write the images (N, C, H, W) into it");
    name = file.tensors.front().first;
    t = &file.tensors.front().second;
  } else if (!(t = file.find(name))) {
    std::string names;
    for (size_t i = 0; i < file.tensors.size() && i < 10; ++i) names += (i ? ", " : "") + file.tensors[i].first;
    if (file.tensors.size() > 10) names += ", ...";
    usage_fail(path, ": no tensor named '", name, "' (it holds ", file.tensors.size(), ": ", names,
               "); pass one of them to --tensor-name, or leave it out for the first");
  }
  const DType d = t->dtype();
  const bool pixels = d == DType::u8;
  if (!pixels && d != DType::f32 && d != DType::f64 && d != DType::f16 && d != DType::bf16)
    usage_fail(path, ": tensor '", name, "' holds ", dtype_name(d),
               "; infer needs floating-point images (F32, F16, BF16 or F64) or 8-bit pixels (U8)");
  if (t->dim() != 4 || t->size(0) < 1)
    usage_fail(path, ": tensor '", name, "' has shape ", shape_str(t->shape()),
               "; infer needs a batch of images (N, C, H, W) with N >= 1 (add a batch dimension for one image)");
  InferInput in{"'" + name + "' of " + path, d == DType::f32 ? t->clone() : t->cast(DType::f32), ""};
  if (pixels) {
    float* p = in.images.data<float>();
    for (int64_t i = 0; i < in.images.numel(); ++i) p[i] /= 255.f;
  }
  if (normalises(o, pixels)) {
    const Stats s = stats_for(o, static_cast<int>(in.images.size(1)));
    normalise(in.images, s);
    in.how = std::string(pixels ? "8-bit pixels scaled to [0, 1], " : "") + stats_text(s);
  } else {
    in.how = pixels ? "8-bit pixels scaled to [0, 1], not normalised (--normalize no)"
                    : "float images taken as normalised already (--normalize yes normalises [0, 1] images)";
  }
  return in;
}

InferInput from_idx(const InferInputOptions& o) {
  const std::string& path = o.paths.front();
  Tensor raw = data::read_idx(path);
  if (raw.dtype() != DType::u8 || (raw.dim() != 3 && raw.dim() != 4) || raw.size(0) < 1)
    usage_fail(path, ": an IDX file of ", dtype_name(raw.dtype()), " ", shape_str(raw.shape()),
               "; infer reads IDX images: 8-bit (N, H, W), as MNIST's and Fashion-MNIST's *-images-idx3-ubyte");
  const int64_t n = raw.size(0), c = raw.dim() == 4 ? raw.size(1) : 1;
  const int64_t h = raw.size(raw.dim() - 2), w = raw.size(raw.dim() - 1);
  if (c != 1 && c != o.in_channels)
    usage_fail(path, ": ", c, "-channel images, and the model takes ", o.in_channels);
  // As dpx train made its input from such a set (core/data/transforms.hpp): normalise, resize to
  // the run's --image-size, grey to RGB for a 3-channel model.
  const bool norm = normalises(o, true);
  Stats s;
  if (norm) s = stats_for(o, static_cast<int>(c));
  std::vector<data::TransformPtr> chain;
  if (norm) chain.push_back(data::normalize(s.mean, s.std));
  const int64_t size = o.image_size > 0 ? o.image_size : 0;
  if (size > 0 && (size != h || size != w)) chain.push_back(data::resize(size, size));
  if (c == 1 && o.in_channels > 1) chain.push_back(data::grey_to_rgb(o.in_channels));
  Shape shape = {c, h, w};
  std::vector<Shape> shapes = {shape};
  for (const auto& t : chain) shapes.push_back(shape = t->output_shape(shape));
  const int64_t in_size = c * h * w, out_size = shape[0] * shape[1] * shape[2];
  // All of them become one float tensor: 60,000 images at 224x224x3 would be 36 GB.
  constexpr double kMaxInputBytes = 4.0 * (1 << 30);
  if (static_cast<double>(n) * static_cast<double>(out_size) * sizeof(float) > kMaxInputBytes)
    usage_fail(path, ": ", n, " images of ", shape_str(shape), " make ",
               static_cast<double>(n) * static_cast<double>(out_size) * sizeof(float) / 1e9,
               " GB of input, more than infer holds at once (4 GiB): pass a file of fewer images");
  InferInput in{path, Tensor::empty({n, shape[0], shape[1], shape[2]}), ""};
  std::vector<float> a(static_cast<size_t>(std::max(in_size, out_size))), b(a.size());
  const uint8_t* px = raw.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < in_size; ++j) a[static_cast<size_t>(j)] = px[i * in_size + j] / 255.f;
    for (size_t k = 0; k < chain.size(); ++k) {
      chain[k]->apply(b.data(), a.data(), shapes[k]);
      std::swap(a, b);
    }
    std::memcpy(in.images.data<float>() + i * out_size, a.data(), static_cast<size_t>(out_size) * sizeof(float));
  }
  in.how = "8-bit pixels scaled to [0, 1]" + (norm ? ", " + stats_text(s) : std::string(", not normalised")) +
           (size > 0 && (size != h || size != w) ? detail::concat(", resized to ", size, "x", size) : "") +
           (c == 1 && o.in_channels > 1 ? ", grey replicated to RGB" : "");
  return in;
}

InferInput from_images(const InferInputOptions& o) {
  if (o.in_channels != 3)
    usage_fail("--input: JPEG and PNG images are RGB, and the model takes ", o.in_channels, " channel(s)");
  data::ImageTransformOptions t;
  t.train = false;  // Resize(size * 256 / 224) + CenterCrop(size), torchvision's evaluation transform
  t.size = o.image_size > 0 ? o.image_size : 224;
  t.dct_scaling = false;  // as torchvision: full-size decodes
  const bool norm = normalises(o, true);
  Stats s{{0, 0, 0}, {1, 1, 1}, ""};
  if (norm) s = stats_for(o, 3);
  const data::NormalizeTable table({s.mean[0], s.mean[1], s.mean[2]}, {s.std[0], s.std[1], s.std[2]});
  const int64_t n = static_cast<int64_t>(o.paths.size());
  InferInput in{detail::concat(n, " image file(s)"), Tensor::empty({n, 3, t.size, t.size}), ""};
  Rng unused(0);  // the evaluation transform draws nothing
  for (int64_t i = 0; i < n; ++i) {
    const std::string& path = o.paths[static_cast<size_t>(i)];
    if (kind_of(path) != Kind::image)
      usage_fail("--input '", path, "': not a JPEG or PNG image; image files cannot be mixed with other inputs");
    const std::vector<uint8_t> bytes = read_all(path);
    try {
      data::transform_image(bytes, path, t, table, unused, in.images.data<float>() + i * 3 * t.size * t.size);
    } catch (const Error& e) {
      usage_fail("--input '", path, "': ", e.what());
    }
  }
  in.how = detail::concat("resized to ", t.effective_resize_size(), " and centre-cropped to ", t.size, "x", t.size,
                          " (torchvision's evaluation transform), ",
                          norm ? stats_text(s) : std::string("scaled to [0, 1], not normalised"));
  return in;
}

}  // namespace

std::vector<float> parse_floats(const std::string& text, const std::string& what) {
  std::vector<float> out;
  for (double v : numbers(text, 0, what, "0.286 or 0.485,0.456,0.406")) {
    if (!std::isfinite(v)) usage_fail(what, " '", excerpt(text), "': ", v, " is not a finite number");
    out.push_back(static_cast<float>(v));
  }
  return out;
}

bool looks_like_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<char, 9> h{};
  in.read(h.data(), h.size());
  return in.gcount() == 9 && h[8] == '{';
}

InferInput read_infer_input(const InferInputOptions& o) {
  if (o.paths.empty()) usage_fail("--input: name a safetensors file, an IDX images file, or JPEG/PNG images");
  const Kind k = kind_of(o.paths.front());
  if (k != Kind::image && o.paths.size() > 1)
    usage_fail("--input: several files are read only as JPEG/PNG images; '", o.paths.front(),
               "' is a ", k == Kind::idx ? "IDX" : "safetensors", " file: pass it alone");
  if (k != Kind::safetensors && !o.tensor_name.empty())
    usage_fail("--tensor-name names a tensor of a safetensors --input; '", o.paths.front(), "' is not one");
  switch (k) {
    case Kind::safetensors: return from_safetensors(o);
    case Kind::idx: return from_idx(o);
    case Kind::image: return from_images(o);
  }
  fail("unreachable");
}

}  // namespace dpx::tools
