// make_dataset: the name -> data set factory, and the small shared helpers of dataset.hpp.
#include "core/data/datasets.hpp"

#include <algorithm>

#include "core/data/mnist.hpp"
#include "core/data/synthetic.hpp"
#include "core/data/transforms.hpp"

namespace dpx::data {

std::string split_name(Split s) { return s == Split::train ? "train" : "test"; }

std::string describe_dataset(const std::string& name, const Dataset& d) {
  return name + " (" + std::to_string(d.size()) + " x " + shape_str(d.sample_shape()) + ", " +
         std::to_string(d.num_classes()) + " classes)";
}

const std::vector<std::string>& dataset_names() {
  static const std::vector<std::string> names = {"fashion-mnist", "mnist", "synthetic", "imagefolder", "tinyimagenet"};
  return names;
}

int default_image_size(const std::string& dataset) { return dataset == "tinyimagenet" ? 64 : 224; }

Normalisation normalisation_of(const DatasetSpec& spec) {
  if (spec.name == "imagefolder" || spec.name == "tinyimagenet")
    return {{spec.images.transform.mean.begin(), spec.images.transform.mean.end()},
            {spec.images.transform.std.begin(), spec.images.transform.std.end()}};
  if (!spec.normalize) return {};
  if (spec.name == "fashion-mnist") return {{kFashionMnistMean}, {kFashionMnistStd}};
  if (spec.name == "mnist") return {{kMnistMean}, {kMnistStd}};
  return {};
}

std::shared_ptr<const Dataset> make_dataset(const DatasetSpec& spec, Split split) {
  if (spec.image_size < 0) usage_fail("image size must be >= 0, got ", spec.image_size);
  if (spec.channels < 0) usage_fail("channels must be >= 0, got ", spec.channels);
  if (spec.name == "synthetic") {
    // The test split: a sixth of the train size (Fashion-MNIST's 10000 : 60000), other noise.
    SyntheticOptions so;
    so.size = split == Split::train ? spec.synthetic_size : std::max<int64_t>(1, spec.synthetic_size / 6);
    int64_t side = spec.image_size > 0 ? spec.image_size : 28;
    so.sample_shape = {spec.channels > 0 ? spec.channels : 1, side, side};
    so.num_classes = spec.num_classes;
    so.seed = spec.seed;
    so.sample_stream = split == Split::train ? 0 : 1;
    return std::make_shared<SyntheticDataset>(so);
  }
  if (spec.name == "imagefolder" || spec.name == "tinyimagenet") {
    if (spec.channels != 0 && spec.channels != 3)
      usage_fail("--channels ", spec.channels, ": images from folders are RGB (3 channels); leave --channels out");
    ImageSetOptions o = spec.images;
    o.transform.size = spec.image_size > 0 ? spec.image_size : default_image_size(spec.name);
    const FolderLayout layout = spec.name == "tinyimagenet" ? FolderLayout::tinyimagenet : FolderLayout::imagefolder;
    return load_image_folder(layout, spec.dir, split, o, spec.seed);
  }
  std::shared_ptr<const Dataset> base;
  if (spec.name == "fashion-mnist") base = load_fashion_mnist(spec.dir, split);
  else if (spec.name == "mnist") base = load_mnist(spec.dir, split);
  else
    usage_fail("unknown data set '", excerpt(spec.name), "': use fashion-mnist, mnist, synthetic, imagefolder or tinyimagenet");
  const Normalisation n = normalisation_of(spec);  // std 0: none
  Shape s = base->sample_shape();
  int64_t h = spec.image_size > 0 ? spec.image_size : s[1], w = spec.image_size > 0 ? spec.image_size : s[2];
  int64_t c = spec.channels > 0 ? spec.channels : s[0];
  return with_transforms(base, model_input_transforms(s, c, h, w, n.mean.empty() ? 0.f : n.mean[0],
                                                      n.std.empty() ? 0.f : n.std[0]));
}

}  // namespace dpx::data
