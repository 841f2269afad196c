// Finding a model's classifier by its module path, building the new heads, and freezing the
// backbone (requires_grad off, which layers, DDP's buckets and SGD all honour).
#include "zoo/heads.hpp"

#include "core/error.hpp"
#include "layers/layers.hpp"

namespace dpx::zoo {

namespace {
constexpr uint64_t kHeadStream = 0x4845414400000001ull;  // "HEAD": the head's own Rng stream

bool is_head(const std::string& h) { return h == "default" || h == "linear" || h == "mlp4096"; }
}  // namespace

std::string head_names() { return "default, linear, mlp4096"; }

ClassifierSite find_classifier(nn::Module& root, const ModelInfo& info) {
  if (info.classifier.empty())
    usage_fail(info.name, " does not declare where its classifier is (ModelInfo::classifier), so it "
               "cannot take another head or freeze its backbone");
  ClassifierSite site;
  nn::Module* parent = nullptr;
  nn::Module* at = &root;
  size_t begin = 0;
  while (begin <= info.classifier.size()) {
    size_t dot = info.classifier.find('.', begin);
    if (dot == std::string::npos) dot = info.classifier.size();
    const std::string part = info.classifier.substr(begin, dot - begin);
    nn::Module* next = nullptr;
    for (size_t i = 0; i < at->num_children(); ++i)
      if (at->child_name(i) == part) next = &at->child(i);
    if (!next) fail(info.name, ": no module '", info.classifier, "' (the registered classifier path)");
    parent = at;
    at = next;
    site.name = part;
    begin = dot + 1;
  }
  site.parent = dynamic_cast<nn::Sequential*>(parent);
  if (!site.parent)
    fail(info.name, ": the classifier '", info.classifier, "' sits in a ", parent->type_name(),
         ", which cannot swap children; register a path whose parent is a Sequential");
  site.module = at;
  std::vector<nn::Module*> order{at};
  for (auto& [name, m] : at->named_modules()) order.push_back(m);
  for (nn::Module* m : order) {
    if (auto* fc = dynamic_cast<nn::Linear*>(m)) {
      site.in_features = fc->in_features();
      return site;
    }
    if (auto* conv = dynamic_cast<nn::Conv2d*>(m)) {
      site.in_features = conv->in_channels();
      site.spatial = true;
      return site;
    }
  }
  fail(info.name, ": the classifier '", info.classifier, "' has no Linear or Conv2d to read its input width from");
}

std::unique_ptr<nn::Module> make_head(const std::string& head, int64_t in_features, bool spatial,
                                      int num_classes, Rng& rng) {
  if (!is_head(head) || head == "default")
    usage_fail("unknown head '", head, "': use linear or mlp4096 (or default for the model's own)");
  auto layers = std::make_unique<nn::Sequential>();
  if (spatial) {
    layers->add("pool", std::make_unique<nn::AdaptiveAvgPool2d>(1, 1));
    layers->add("flatten", std::make_unique<nn::Flatten>());
  }
  if (head == "linear") {
    auto fc = std::make_unique<nn::Linear>(in_features, num_classes, rng);
    if (!spatial) return fc;  // a plain Linear in the classifier's place ("fc.weight")
    layers->add("0", std::move(fc));
    return layers;
  }
  const int64_t hidden = 4096;
  layers->add("0", std::make_unique<nn::Linear>(in_features, hidden, rng));
  layers->add("1", std::make_unique<nn::ReLU>());
  layers->add("2", std::make_unique<nn::Dropout>(0.5f, rng));
  layers->add("3", std::make_unique<nn::Linear>(hidden, hidden, rng));
  layers->add("4", std::make_unique<nn::ReLU>());
  layers->add("5", std::make_unique<nn::Dropout>(0.5f, rng));
  layers->add("6", std::make_unique<nn::Linear>(hidden, num_classes, rng));
  return layers;
}

void apply_head(nn::Module& root, const ModelInfo& info, const ModelOptions& o) {
  if (!is_head(o.head)) usage_fail("--head: unknown head '", o.head, "': use ", head_names());
  if (o.head == "default" && !o.freeze_backbone) return;
  ClassifierSite site = find_classifier(root, info);
  if (o.head != "default") {
    Rng rng(o.seed, kHeadStream);
    site.parent->replace(site.name, make_head(o.head, site.in_features, site.spatial, o.num_classes, rng));
  }
  if (o.freeze_backbone) {
    const std::string prefix = info.classifier + ".";
    for (auto& [name, p] : root.named_parameters()) p->requires_grad = name.rfind(prefix, 0) == 0;
  }
}

}  // namespace dpx::zoo
