// safetensors: round trips, and a clear error naming the file and the tensor for every kind of
// corrupt or truncated file; the index parser's checks.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "fp4moe/error.h"
#include "io/checkpoint.h"

namespace fp4moe {
namespace {

std::vector<uint8_t> bytes_of(std::initializer_list<float> f) {
  std::vector<uint8_t> b(f.size() * 4);
  std::memcpy(b.data(), std::data(f), b.size());
  return b;
}

TEST(Safetensors, RoundTripKeepsEverything) {
  const std::vector<StTensorOut> t = {{"a.weight", StDtype::kU8, {2, 3}, {1, 2, 3, 4, 5, 6}},
                                      {"a.scale", StDtype::kF32, {}, bytes_of({0.5f})},
                                      {"b", StDtype::kF32, {2}, bytes_of({1.0f, -2.0f})},
                                      {"empty", StDtype::kBF16, {0, 4}, {}},
                                      {"fp4", StDtype::kF4, {4}, {0x21, 0x43}},
                                      {"fp6", StDtype::kF6E2M3, {4}, {1, 2, 3}},  // 4 x 6 bits: 3 bytes
                                      {"fp6b", StDtype::kF6E3M2, {8}, {1, 2, 3, 4, 5, 6}},
                                      {"c64", StDtype::kC64, {1}, bytes_of({1.0f, -1.0f})}};
  const SafetensorsFile f = SafetensorsFile::from_bytes(serialize_safetensors(t, {{"k", "v"}}), "mem");
  EXPECT_EQ(f.metadata().at("k"), "v");
  for (const auto& x : t) {
    const StTensorView& v = f.tensor(x.name);
    EXPECT_EQ(v.dtype, x.dtype);
    EXPECT_EQ(v.shape, x.shape);
    EXPECT_TRUE(std::equal(v.bytes.begin(), v.bytes.end(), x.bytes.begin(), x.bytes.end())) << x.name;
  }
  EXPECT_THROW(f.tensor("nope"), Error);
  EXPECT_THROW(serialize_safetensors({{"x", StDtype::kF32, {3}, {1, 2}}}, {}), Error);  // size mismatch
  EXPECT_THROW(serialize_safetensors({{"x", StDtype::kU8, {1}, {1}}, {"x", StDtype::kU8, {1}, {1}}}, {}), Error);
  // Negative dimensions: (-1) x (-1) = 1 byte must not pass, nor a product that wraps.
  EXPECT_THROW(serialize_safetensors({{"x", StDtype::kU8, {-1, -1}, {1}}}, {}), Error);
  constexpr int64_t kHuge = int64_t{1} << 61;
  EXPECT_THROW(serialize_safetensors({{"x", StDtype::kU8, {-kHuge, kHuge, kHuge}, {}}}, {}), Error);
  EXPECT_EQ(st_tensor_bytes(StDtype::kU8, {-1, -1}), -1);
}

// Builds an image from a raw header text and a data buffer.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes, uint64_t declared = 0) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  const uint64_t n = declared ? declared : header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  return out;
}

void expect_error(const std::vector<uint8_t>& img, const std::string& needle) {
  try {
    SafetensorsFile::from_bytes(img, "bad.safetensors");
    ADD_FAILURE() << "accepted; expected an error with '" << needle << "'";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << m;
  }
}

TEST(Safetensors, CorruptFilesAreClearErrors) {
  const std::string ok = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(SafetensorsFile::from_bytes(image(ok, 8), "good"));
  expect_error({1, 2, 3}, "truncated");
  expect_error(image(ok, 8, 1 << 20), "runs past the end");
  expect_error(image(ok, 8, uint64_t{1} << 40), "exceeds the 100 MB limit");
  expect_error(image("[1,2]", 0), "does not start with '{'");
  expect_error(image("{\"t\": ", 0), "not valid JSON");
  expect_error(image(R"({"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8), "tensor 't': unknown dtype 'F33'");
  expect_error(image(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "tensor 't': shape x dtype needs 12");
  expect_error(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "tensor 't': data_offsets [0, 8) run past");
  expect_error(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "reversed");
  expect_error(image(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "non-negative");
  expect_error(image(R"({"t":{"dtype":"F32","shape":[2]}})", 8), "data_offsets");
  expect_error(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"u":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", 8),
               "overlap");
  expect_error(image(R"({"__metadata__":{"k":1}})", 0), "not a string");
  expect_error(image(R"({"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2), "whole number of bytes");
  expect_error(image(R"({"t":{"dtype":"F6_E2M3","shape":[3],"data_offsets":[0,3]}})", 3), "whole number of bytes");
  expect_error(image(R"({"t":"x"})", 0), "entry is not an object");
  // A NUL in a name is written as \0: what() ended at it, and the reason with it.
  expect_error(image(R"({"a\u0000b":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}})", 8),
               "tensor 'a\\0b': unknown dtype 'F99'");
  expect_error(image(R"({"t":{"dtype":"F32","shape":[1e999],"data_offsets":[0,8]}})", 8), "not valid JSON");
  // Element counts whose byte size leaves int64 once wrapped to 0 and 8 and were accepted.
  expect_error(image(R"({"t":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})", 0),
               "overflows");
  expect_error(image(R"({"t":{"dtype":"F64","shape":[2305843009213693953],"data_offsets":[0,8]}})", 8), "overflows");
}

// The tensors tile the data buffer: a hole before, between or after them is refused (the format
// forbids it, as the reference library does), a tensor of no bytes fits anywhere in the tiling.
TEST(Safetensors, TensorsTileTheDataBufferExactly) {
  EXPECT_NO_THROW(SafetensorsFile::from_bytes(
      image(R"({"e":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
            R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})", 6), "good"));
  expect_error(image(R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})", 8),
               "bytes [0, 6) of the data buffer belong to no tensor");
  expect_error(image(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})", 5),
               "bytes [2, 3) of the data buffer belong to no tensor");
  expect_error(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12),
               "the data buffer's last 4 bytes (from byte 8) belong to no tensor");
  expect_error(image(R"({"__metadata__":{"k":"v"}})", 3), "the data buffer's last 3 bytes (from byte 0)");
}

// A key twice (a tensor named twice: nlohmann kept the last without a word) and nesting past any
// real header's (copying such a document recursed once per level) are refused.
TEST(Safetensors, RepeatedKeysAndDeepNestingAreRefused) {
  expect_error(image(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"t":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})", 6),
               "key 't' given twice in one object");
  expect_error(image(R"({"t":{"dtype":"U8","shape":[4],"shape":[4],"data_offsets":[0,4]}})", 4), "key 'shape' given twice");
  const std::string deep = R"({"__metadata__":{"k":)" + std::string(100000, '[') + std::string(100000, ']') + "}}";
  expect_error(image(deep, 0), "nested deeper than 64 levels");
}

// A NUL in the header ended nlohmann's input: what followed it was accepted unread (the Python
// reader refuses it as trailing characters).
TEST(Safetensors, NulInTheHeaderIsRefused) {
  std::string nul = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  nul += std::string(1, '\0') + R"(, "b": 1})";
  expect_error(image(nul, 1), "a NUL byte at offset 53");
  expect_error(image(std::string("{}") + std::string(6, '\0'), 0), "a NUL byte at offset 2");
}

// The header of a file of many tensors parses in time linear in its size: the checks ran where
// nlohmann's parser walked each object's parent at its end, 80,000 tensors in two minutes.
TEST(Safetensors, ManyTensorsParseInLinearTime) {
  constexpr int kTensors = 200000;
  std::string header = "{";
  for (int i = 0; i < kTensors; ++i)
    header += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
  header += "}";
  const auto t0 = std::chrono::steady_clock::now();
  const SafetensorsFile f = SafetensorsFile::from_bytes(image(header, 0), "many");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(f.names().size(), static_cast<size_t>(kTensors));
  EXPECT_LT(s, 30.0) << "a header of " << header.size() << " bytes";  // ~1 s here; hours if quadratic
}

TEST(SafetensorsIndex, ValidatesWeightMap) {
  EXPECT_EQ(parse_safetensors_index(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})", "i").size(), 2u);
  for (const char* bad : {"not json", "[]", "{}", R"({"weight_map": []})", R"({"weight_map": {}})",
                          R"({"weight_map": {"a": 3}})", R"({"weight_map": {"a": "../etc/passwd"}})",
                          R"({"weight_map": {"a": "sub/x.safetensors"}})",
                          R"({"weight_map": {"a": "s1.safetensors", "a": "s2.safetensors"}})",
                          "-38E888" /* found by the fuzzer: a number out of range threw past the parser */}) {
    EXPECT_THROW(parse_safetensors_index(bad, "idx.json"), Error) << bad;
  }
}

}  // namespace
}  // namespace fp4moe
