// Tests of the safetensors reader and writer: bit-exact round trips for every dtype, files laid
// out byte for byte as the reference writer (huggingface/safetensors) lays them out, and every
// rejection of a malformed file with a message naming the file and the tensor.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.hpp"
#include "tests/common/files.hpp"
#include "tests/common/errors.hpp"

namespace fs = std::filesystem;
using dpx::DType;
using dpx::Tensor;

using dpx::testing::contains;
using dpx::testing::error_of;

using dpx::testing::file_text;

namespace {

// Every test's files go into its own TempDir (tests/common/files.hpp), tagged "st".
struct TempDir : dpx::testing::TempDir {
  TempDir() : dpx::testing::TempDir("st") {}
};

void spill(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

// A file made by hand: the length prefix, the header exactly as given (no padding), the data.
std::string file_bytes(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

template <typename T>
std::string bytes_of(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return s;
}

std::string tensor_bytes(const Tensor& t) { return std::string(static_cast<const char*>(t.raw()), t.nbytes()); }

// A tensor of any dtype whose bytes follow a pattern that hits every byte value, NaN payloads
// and denormals included, so a round trip that converts instead of copying shows up.
Tensor patterned(const dpx::Shape& shape, DType dtype, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(i * 131 + seed * 29 + 7);
  return t;
}

// Reads a hand-made file and checks that the error names the file and says `what`.
void check_rejected(const std::string& header, const std::string& data, const std::string& what) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  spill(path, file_bytes(header, data));
  std::string msg = error_of([&] { dpx::read_safetensors(path); });
  INFO("header: ", header);
  CHECK_MESSAGE(contains(msg, path + ": "), msg);
  CHECK_MESSAGE(contains(msg, what), msg);
}

const std::string kA = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

}  // namespace

TEST_CASE("safetensors round trip is bit for bit for every dtype, shape and metadata") {
  TempDir dir;
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"layer1.0.conv1.weight", patterned({4, 3, 2, 2}, DType::f32, 1)},
      {"fc.bias", patterned({5}, DType::f64, 2)},
      {"half", patterned({3, 3}, DType::f16, 3)},
      {"brain", patterned({7}, DType::bf16, 4)},
      {"labels", patterned({2, 5}, DType::i32, 5)},
      {"bn1.num_batches_tracked", patterned({}, DType::i64, 6)},  // 0-dim, as torch saves it
      {"pixels", patterned({3, 1, 5}, DType::u8, 7)},
      {"empty", patterned({0}, DType::f32, 8)},
      {"empty.rows", patterned({2, 0, 3}, DType::bf16, 9)},
      {"ünïcode \"quoted\"\n", patterned({1}, DType::u8, 10)},
  };
  // Special float values, to be sure nothing passes through a float conversion.
  const uint32_t specials[] = {0x7FC00001u, 0x80000000u, 0x7F800000u, 0x00000001u};
  std::memcpy(tensors[0].second.raw(), specials, sizeof specials);
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "dpx \"test\"\tü"}};

  const std::string path = dir.file("model.safetensors");
  dpx::write_safetensors(path, tensors, metadata);
  dpx::SafeTensors st = dpx::read_safetensors(path);

  CHECK(st.path == path);
  CHECK(st.metadata == metadata);
  REQUIRE(st.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, want] = tensors[i];
    CAPTURE(name);
    const auto& [got_name, got] = st.tensors[i];
    CHECK(got_name == name);  // laid out in the order given, read back in offset order
    CHECK(got.dtype() == want.dtype());
    CHECK(got.shape() == want.shape());
    CHECK(got.device().is_cpu());
    CHECK(tensor_bytes(got) == tensor_bytes(want));
    CHECK(st.find(name) == &got);
  }
  CHECK(st.find("missing") == nullptr);

  // The layout: header padded with spaces to 8 bytes, then exactly the tensors' bytes.
  const std::string raw = file_text(path);
  REQUIRE(raw.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  CHECK(n % 8 == 0);
  size_t data_bytes = 0;
  for (const auto& [name, t] : tensors) data_bytes += t.nbytes();
  CHECK(raw.size() == 8 + n + data_bytes);
  const std::string header = raw.substr(8, n);
  const size_t json_end = header.rfind('}') + 1;
  CHECK(header.front() == '{');
  CHECK(header.find_first_not_of(' ', json_end) == std::string::npos);  // padding is spaces only
}

TEST_CASE("safetensors writes a view's own elements, not its whole storage") {
  TempDir dir;
  Tensor full = Tensor::from({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  dpx::write_safetensors(dir.file("slice.safetensors"), {{"rows", full.slice(1, 3)}});
  dpx::SafeTensors st = dpx::read_safetensors(dir.file("slice.safetensors"));
  REQUIRE(st.tensors.size() == 1);
  CHECK(st.tensors[0].second.shape() == dpx::Shape{2, 2});
  CHECK(st.tensors[0].second.to_vector() == std::vector<float>{2, 3, 4, 5});
}

// The reference's own serialization tests state these exact files (safetensors/src/tensor.rs:
// test_serialization_forced_alignement and test_empty); dpx must write the same bytes.
TEST_CASE("safetensors files match the reference writer byte for byte") {
  TempDir dir;
  const std::string path = dir.file("ref.safetensors");

  const std::string attn_header = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})"
                                  "       ";
  REQUIRE(attn_header.size() == 72);
  const std::string attn_data = bytes_of<float>({0, 1, 2, 3, 4, 5});
  Tensor attn = Tensor::from({1, 1, 2, 3}, {0, 1, 2, 3, 4, 5});
  dpx::write_safetensors(path, {{"attn0", attn}});
  CHECK(file_text(path) == le64(72) + attn_header + attn_data);

  dpx::write_safetensors(path, {}, {{"framework", "pt"}});
  CHECK(file_text(path) == le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
  CHECK(dpx::read_safetensors(path).metadata.at("framework") == "pt");

  dpx::write_safetensors(path, {});
  CHECK(file_text(path) == le64(8) + "{}      ");
  CHECK(dpx::read_safetensors(path).tensors.empty());
}

// What safetensors.torch.save_file({"w": ..., "count": ..., "h": ...}, metadata={"format": "pt"})
// writes: the reference sorts by descending dtype (I64 > F32 > F16), then by name, and lists
// "__metadata__" first. Written here by hand from the format, as Python's safetensors is absent.
TEST_CASE("safetensors reads a multi-dtype file laid out by the reference, and writes it back identically") {
  TempDir dir;
  const std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("count":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
      R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
      R"("h":{"dtype":"F16","shape":[3],"data_offsets":[24,30]}})"
      " ";  // 199 bytes of JSON, padded to 200
  REQUIRE(header.size() == 200);
  const std::string data = bytes_of<int64_t>({7}) + bytes_of<float>({1.5f, -2, 0.25f, 1e6f}) +
                           bytes_of<uint16_t>({0x3C00, 0xC000, 0x3800});  // 1, -2, 0.5 in IEEE half
  const std::string file = le64(200) + header + data;
  const std::string path = dir.file("ref.safetensors");
  spill(path, file);

  dpx::SafeTensors st = dpx::read_safetensors(path);
  CHECK(st.metadata == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(st.tensors.size() == 3);
  CHECK(st.tensors[0].first == "count");
  CHECK(st.tensors[1].first == "w");
  CHECK(st.tensors[2].first == "h");
  const Tensor& count = st.expect("count", {}, DType::i64);
  CHECK(count.data<int64_t>()[0] == 7);
  CHECK(st.expect("w", {2, 2}, DType::f32).to_vector() == std::vector<float>{1.5f, -2, 0.25f, 1e6f});
  CHECK(st.expect("h", {3}, DType::f16).to_vector() == std::vector<float>{1, -2, 0.5f});

  // Given in another order, sort_like_reference restores the reference's layout.
  std::vector<std::pair<std::string, Tensor>> shuffled = {st.tensors[2], st.tensors[1], st.tensors[0]};
  dpx::sort_like_reference(shuffled);
  dpx::write_safetensors(dir.file("again.safetensors"), shuffled, st.metadata);
  CHECK(file_text(dir.file("again.safetensors")) == file);
}

TEST_CASE("safetensors reader accepts any key order, null metadata and unknown fields") {
  TempDir dir;
  // Older writers sorted keys by name; the buffer order comes from the offsets alone.
  const std::string header =
      R"({"__metadata__":null,"a":{"dtype":"U8","shape":[2],"data_offsets":[3,5],"extra":true},)"
      R"("b":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"z":{"dtype":"F32","shape":[0],"data_offsets":[5,5]},)"
      R"("y":{"dtype":"F32","shape":[0,4],"data_offsets":[5,5]}})";
  const std::string path = dir.file("order.safetensors");
  spill(path, file_bytes(header, "BBBAA"));
  dpx::SafeTensors st = dpx::read_safetensors(path);
  REQUIRE(st.tensors.size() == 4);
  CHECK(st.tensors[0].first == "b");
  CHECK(st.tensors[1].first == "a");
  CHECK(st.tensors[2].first == "y");  // two empty tensors at one offset: by name
  CHECK(st.tensors[3].first == "z");
  CHECK(tensor_bytes(st.tensors[0].second) == "BBB");
  CHECK(tensor_bytes(st.tensors[1].second) == "AA");
  CHECK(st.metadata.empty());
}

TEST_CASE("safetensors reader rejects a file too short or a header length out of range") {
  TempDir dir;
  const std::string path = dir.file("short.safetensors");
  spill(path, "abcde");
  std::string msg = error_of([&] { dpx::read_safetensors(path); });
  CHECK_MESSAGE(contains(msg, path + ": invalid safetensors file: the file has 5 bytes, shorter than the 8-byte"), msg);

  spill(path, le64(100'000'001) + "{}");
  msg = error_of([&] { dpx::read_safetensors(path); });
  CHECK_MESSAGE(contains(msg, "header length 100000001 is over the limit of 100000000 bytes"), msg);

  spill(path, le64(100) + "{}        ");
  msg = error_of([&] { dpx::read_safetensors(path); });
  CHECK_MESSAGE(contains(msg, "header length 100 reaches beyond the end of the file (18 bytes)"), msg);

  msg = error_of([&] { dpx::read_safetensors(dir.file("absent.safetensors")); });
  CHECK_MESSAGE(contains(msg, "cannot open " + dir.file("absent.safetensors") + ": No such file or directory"), msg);
}

TEST_CASE("safetensors reader rejects a header that is not a JSON object") {
  check_rejected("{not json", "", "the header is not valid JSON");
  check_rejected("{\"a\xff\":1}", "", "the header is not valid JSON");  // invalid UTF-8
  check_rejected("[1, 2]", "", "the header must be a JSON object, not array");
  check_rejected("", "", "the header is not valid JSON");
}

TEST_CASE("safetensors reader rejects entries missing a field or of the wrong JSON type") {
  check_rejected(R"({"a":5})", "", "tensor 'a': must be an object with dtype, shape and data_offsets");
  check_rejected(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", "12345678", "tensor 'a': missing \"dtype\"");
  check_rejected(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", "12345678", "tensor 'a': missing \"shape\"");
  check_rejected(R"({"a":{"dtype":"F32","shape":[2]}})", "12345678", "tensor 'a': missing \"data_offsets\"");
  check_rejected(R"({"a":{"dtype":5,"shape":[2],"data_offsets":[0,8]}})", "12345678",
                 "tensor 'a': \"dtype\" must be a string, not 5");
  check_rejected(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", "12345678",
                 "tensor 'a': \"shape\" must be an array of integers");
  check_rejected(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", "12345678",
                 "tensor 'a': a dimension of \"shape\" must be a non-negative integer, not 2.5");
  check_rejected(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", "12345678",
                 "tensor 'a': \"data_offsets\" must be an array [begin, end], not [0]");
  check_rejected(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,"8"]}})", "12345678",
                 "tensor 'a': data_offsets[1] must be a non-negative integer");
  check_rejected(R"({"__metadata__":"pt",)" + kA + "}", "12345678", "\"__metadata__\" must be an object of strings");
  check_rejected(R"({"__metadata__":{"epoch":3},)" + kA + "}", "12345678",
                 "\"__metadata__\" value of 'epoch' must be a string, not 3");
}

TEST_CASE("safetensors reader rejects unknown or unsupported dtypes and negative dimensions") {
  check_rejected(R"({"a":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", "12345678",
                 "tensor 'a' has dtype \"F17\", which dpx does not hold; dpx reads F64, F32, F16, BF16, I64, I32 and U8");
  check_rejected(R"({"mask":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", "12",
                 "tensor 'mask' has dtype \"BOOL\", which dpx does not hold");
  check_rejected(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "12345678",
                 "tensor 'a': a dimension of \"shape\" is negative (-2)");
  check_rejected(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", "12345678",
                 "tensor 'a': data_offsets [8, 0] end before they begin");
}

TEST_CASE("safetensors reader rejects offsets of the wrong size or outside the data") {
  check_rejected(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678",
                 "tensor 'a': data_offsets [0, 8] hold 8 bytes but F32 (3) needs 12");
  check_rejected(R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}})", "1234",
                 "tensor 'a': data_offsets [0, 4] hold 4 bytes but BF16 (2, 2) needs 8");
  check_rejected(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}})", "",
                 "tensor 'a': shape [4294967296,4294967296,4294967296] has too many elements");
  check_rejected("{" + kA + "}", "1234", "tensor 'a': data_offsets [0, 8] reach beyond the 4 bytes of data");
}

TEST_CASE("safetensors reader requires the offsets to tile the data exactly") {
  const std::string b_at = R"("b":{"dtype":"F32","shape":[2],"data_offsets":)";
  check_rejected("{" + kA + "," + b_at + "[4,12]}}", "123456789012",
                 "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
  check_rejected("{" + kA + "," + b_at + "[12,20]}}", "12345678901234567890",
                 "tensor 'b': data_offsets [12, 20] leave a hole of 4 bytes after tensor 'a'");
  check_rejected("{" + b_at + "[4,12]}}", "123456789012",
                 "tensor 'b': data_offsets [4, 12] leave a hole of 4 bytes after the start of the data");
  check_rejected("{" + kA + "}", "123456789012",
                 "the tensors cover 8 bytes but the data after the header has 12 bytes (trailing bytes)");
  check_rejected("{}", "x", "the tensors cover 0 bytes but the data after the header has 1 bytes");
}

TEST_CASE("safetensors reader rejects duplicate names and keys") {
  check_rejected("{" + kA + "," + kA + "}", "12345678", "tensor 'a' appears twice in the header");
  check_rejected(R"({"a":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", "12345678",
                 "'a' has the key 'dtype' twice");
  check_rejected(R"({"__metadata__":{"k":"1","k":"2"}})", "", "'__metadata__' has the key 'k' twice");
}

TEST_CASE("write_safetensors refuses names it cannot write and leaves no file") {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  Tensor t = Tensor::zeros({2});
  std::string msg = error_of([&] { dpx::write_safetensors(path, {{"a", t}, {"a", t}}); });
  CHECK_MESSAGE(contains(msg, "cannot write " + path + ": tensor 'a' is given twice"), msg);
  msg = error_of([&] { dpx::write_safetensors(path, {{"__metadata__", t}}); });
  CHECK_MESSAGE(contains(msg, "may not be called \"__metadata__\""), msg);
  msg = error_of([&] { dpx::write_safetensors(path, {{"u", Tensor()}}); });
  CHECK_MESSAGE(contains(msg, "tensor 'u' is undefined"), msg);
  msg = error_of([&] { dpx::write_safetensors(path, {{"bad\xff", t}}); });
  CHECK_MESSAGE(contains(msg, "not valid UTF-8"), msg);
  msg = error_of([&] { dpx::write_safetensors(dir.file("missing/w.safetensors"), {{"a", t}}); });
  CHECK_MESSAGE(contains(msg, "No such file or directory"), msg);
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("check_tensor_matches and SafeTensors::expect say what the file has and what the model expects") {
  Tensor w = Tensor::zeros({64, 3, 7, 7}, DType::f16);
  CHECK_NOTHROW(dpx::check_tensor_matches("layer1.0.conv1.weight", w, {64, 3, 7, 7}, DType::f16));
  CHECK(error_of([&] { dpx::check_tensor_matches("layer1.0.conv1.weight", w, {64, 3, 7, 7}, DType::f32); }) ==
        "layer1.0.conv1.weight: file has F16 (64, 3, 7, 7), model expects F32 (64, 3, 7, 7)");
  CHECK(error_of([&] { dpx::check_tensor_matches("fc.weight", w, {10, 4096}, DType::f16); }) ==
        "fc.weight: file has F16 (64, 3, 7, 7), model expects F16 (10, 4096)");

  dpx::SafeTensors st;
  st.path = "resnet18.safetensors";
  st.tensors.emplace_back("conv1.weight", w);
  CHECK(&st.expect("conv1.weight", {64, 3, 7, 7}, DType::f16) == &st.tensors[0].second);
  CHECK(error_of([&] { st.expect("conv1.weight", {64, 3, 7, 7}, DType::f32); }) ==
        "resnet18.safetensors: conv1.weight: file has F16 (64, 3, 7, 7), model expects F32 (64, 3, 7, 7)");
  std::string msg = error_of([&] { st.expect("fc.bias", {10}, DType::f32); });
  CHECK_MESSAGE(contains(msg, "resnet18.safetensors: no tensor 'fc.bias' in the file"), msg);
}

TEST_CASE("sort_like_reference orders by descending dtype, then name, so every tensor is aligned") {
  std::vector<std::pair<std::string, Tensor>> ts;
  const DType all[] = {DType::u8, DType::f16, DType::bf16, DType::i32, DType::f32, DType::f64, DType::i64};
  for (DType t : all) ts.emplace_back(std::string("b.") + std::string(dpx::dtype_name(t)), Tensor::zeros({3}, t));
  for (DType t : all) ts.emplace_back(std::string("a.") + std::string(dpx::dtype_name(t)), Tensor::zeros({1}, t));
  dpx::sort_like_reference(ts);
  std::vector<std::string> names;
  for (const auto& [n, t] : ts) names.push_back(n);
  CHECK(names == std::vector<std::string>{"a.i64", "b.i64", "a.f64", "b.f64", "a.f32", "b.f32", "a.i32", "b.i32",
                                          "a.bf16", "b.bf16", "a.f16", "b.f16", "a.u8", "b.u8"});
  size_t offset = 0;
  for (const auto& [n, t] : ts) {
    CHECK_MESSAGE(offset % dpx::dtype_size(t.dtype()) == 0, n);
    offset += t.nbytes();
  }
}

TEST_CASE("safetensors dtype names") {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    CHECK(dpx::safetensors_dtype_from_name(dpx::safetensors_dtype_name(t)) == t);
  CHECK(dpx::safetensors_dtype_name(DType::bf16) == "BF16");
  CHECK_FALSE(dpx::safetensors_dtype_from_name("I8").has_value());
  CHECK_FALSE(dpx::safetensors_dtype_from_name("f32").has_value());  // the file's names are upper case
}

// A header of nested brackets once crashed dpx: nlohmann's dump() and copies recurse once per
// level. The reader refuses such a header before parsing it (kSafetensorsMaxHeaderDepth).
TEST_CASE("safetensors reader refuses a header nested deeper than the format allows, without crashing") {
  const std::string deep = "the header nests arrays and objects deeper than";
  check_rejected(std::string(100000, '['), "", deep);
  check_rejected(R"({"a":)" + std::string(100000, '[') + std::string(100000, ']') + "}", "", deep);
  check_rejected(std::string(50000, '{') + std::string(50000, '}'), "", deep);

  // 127 levels (as deep as the reference's serde_json parses) are read; 128 are not.
  auto with_extra_depth = [](int levels) {  // the top object and the entry are 2 levels
    return R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":)" + std::string(levels - 2, '[') +
           std::string(levels - 2, ']') + "}}";
  };
  TempDir dir;
  const std::string path = dir.file("deep.safetensors");
  spill(path, file_bytes(with_extra_depth(127), "x"));
  CHECK(dpx::read_safetensors(path).tensors.size() == 1);
  check_rejected(with_extra_depth(128), "x", deep + std::string(" 127 levels"));

  // Brackets inside strings are text, not nesting.
  const std::string name(1000, '[');
  spill(path, file_bytes("{\"" + name + R"(\"[{":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"));
  CHECK(dpx::read_safetensors(path).tensors.at(0).first == name + "\"[{");
}

TEST_CASE("safetensors error messages quote at most a short excerpt of a bad header") {
  const std::string big(1'000'000, 'x');
  auto check_short = [](const std::string& header, const std::string& data, const std::string& what) {
    TempDir dir;
    const std::string path = dir.file("big.safetensors");
    spill(path, file_bytes(header, data));
    std::string msg = error_of([&] { dpx::read_safetensors(path); });
    INFO("message: ", msg.substr(0, 600));
    CHECK(contains(msg, path + ": "));
    CHECK(contains(msg, what));
    CHECK(msg.size() < path.size() + 400);
  };
  check_short(R"({"a":")" + big + R"("})", "", "tensor 'a': must be an object with dtype, shape and data_offsets");
  check_short(R"({")" + big + R"(":5})", "", "must be an object with dtype");
  check_short(R"({"a":{"dtype":")" + big + R"(","shape":[2],"data_offsets":[0,8]}})", "12345678",
              "which dpx does not hold");
  check_short(R"({"a":{"dtype":"F32","shape":")" + big + R"(","data_offsets":[0,8]}})", "12345678",
              "\"shape\" must be an array of integers");
  check_short(R"({"a":{"dtype":"F32","shape":[)" + std::string(100000, '1') + R"(],"data_offsets":[0,8]}})",
              "12345678", "the header is not valid JSON");  // a number too large for a double
  check_short(R"({"__metadata__":{")" + big + R"(":3}})", "", "\"__metadata__\" value of");
  check_short(R"({"__metadata__":[")" + big + R"("]})", "", "\"__metadata__\" must be an object of strings");
  check_short(R"({")" + big + R"(":{},")" + big + R"(":{}})", "", "appears twice in the header");
  check_short(R"({"a":")" + big, "", "the header is not valid JSON");  // unterminated string
  check_short("{\"a\":\"" + big + "\x01\"}", "", "the header is not valid JSON");  // control character
}

TEST_CASE("decode_safetensors reads bytes in memory as read_safetensors reads the file") {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  dpx::write_safetensors(path, {{"w", patterned({2, 3}, DType::f32, 1)}, {"n", patterned({}, DType::i64, 2)}},
                         {{"format", "pt"}});
  const std::string raw = file_text(path);
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
  dpx::SafeTensors file = dpx::read_safetensors(path), memory = dpx::decode_safetensors(bytes, "in memory");
  CHECK(memory.path == "in memory");
  CHECK(memory.metadata == file.metadata);
  REQUIRE(memory.tensors.size() == file.tensors.size());
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    CHECK(memory.tensors[i].first == file.tensors[i].first);
    CHECK(memory.tensors[i].second.shape() == file.tensors[i].second.shape());
    CHECK(tensor_bytes(memory.tensors[i].second) == tensor_bytes(file.tensors[i].second));
  }
  std::string msg = error_of([&] { dpx::decode_safetensors(bytes.first(7), "in memory"); });
  CHECK_MESSAGE(contains(msg, "in memory: invalid safetensors file: the file has 7 bytes"), msg);
  msg = error_of([&] { dpx::decode_safetensors(bytes.first(bytes.size() - 1), "in memory"); });
  CHECK_MESSAGE(contains(msg, "in memory: invalid safetensors file: tensor"), msg);
}

TEST_CASE("excerpt keeps short text and cuts long text at a character boundary") {
  CHECK(dpx::excerpt("short") == "short");
  CHECK(dpx::excerpt(std::string(80, 'a')) == std::string(80, 'a'));
  CHECK(dpx::excerpt(std::string(81, 'a')) == std::string(80, 'a') + "…");
  CHECK(dpx::excerpt("abü", 3) == "ab…");  // ü is 2 bytes: not cut in half
  CHECK(dpx::excerpt("üüü", 1) == "…");
}
