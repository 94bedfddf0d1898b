// safetensors files (https://github.com/huggingface/safetensors, format section):
//   u64 little-endian header length N | N bytes of JSON | data buffer
// Each tensor entry: {"dtype", "shape", "data_offsets": [begin, end)} relative to the buffer;
// an optional "__metadata__" maps strings to strings.
//
// The reader memory-maps the file and hands out zero-copy views. It validates everything a
// hostile or truncated file could get wrong, and names the file and the tensor in each error:
// the header's JSON strictly (parse_json_document: no key twice, bounded nesting), and the
// tensors must tile the data buffer with no hole, overlap or tail, as the format requires.
// What it cannot guard: a file truncated by another process after it was mapped. Reading a view
// past the new end raises SIGBUS, as with any reader that maps its files (the safetensors
// library's safe_open among them); do not rewrite a checkpoint while it is being loaded.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace fp4moe {

// Every dtype of the format (safetensors 0.6): a file of any of them can be listed and its
// tensors checked; the loaders take the few they read.
enum class StDtype { kBool, kU8, kI8, kF8E4M3, kF8E5M2, kF8E8M0, kF4, kF6E2M3, kF6E3M2, kI16, kU16, kF16, kBF16,
                     kI32, kU32, kF32, kI64, kU64, kF64, kC64 };
// The dtype's string in the file ("F8_E4M3") and back; unknown strings throw.
const char* to_string(StDtype d);
StDtype st_dtype_from_string(const std::string& s, const std::string& context);
// Size in bits of one element (F4 is 4).
int st_dtype_bits(StDtype d);

struct StTensorView {
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
  int64_t elements() const;
};

class SafetensorsFile {
 public:
  // Opens and validates; throws fp4moe::Error naming the file (and tensor) on any problem.
  static SafetensorsFile open(const std::string& path);
  // Validates an in-memory image (used by the fuzzer and by tests); `name` labels errors.
  static SafetensorsFile from_bytes(std::vector<uint8_t> image, const std::string& name);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws when the tensor is missing.
  const StTensorView& tensor(const std::string& name) const;

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

 private:
  SafetensorsFile() = default;
  void parse(const std::string& label);

  std::string path_;
  struct Mapping;
  std::unique_ptr<Mapping> mapping_;
  std::span<const uint8_t> image_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, StTensorView> tensors_;
};

// A tensor to write: name, dtype, shape and its bytes (row-major, little-endian).
struct StTensorOut {
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Streaming writer: the header for `tensors` (in order, offsets from their shapes), then
// write_data(i, out) for each tensor, which must write exactly its bytes.
struct StTensorMeta {
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
};
void write_safetensors_streamed(const std::string& path, const std::vector<StTensorMeta>& tensors,
                                const std::function<void(size_t, std::ostream&)>& write_data,
                                const std::map<std::string, std::string>& metadata = {});
// Bytes of a tensor of this dtype and shape (-1 when not a whole number of bytes).
int64_t st_tensor_bytes(StDtype d, const std::vector<int64_t>& shape);

// Writes tensors in the given order, header padded with spaces to 8 bytes as the reference
// implementation does. Throws on a shape/bytes mismatch or duplicate names.
void write_safetensors(const std::string& path, const std::vector<StTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
std::vector<uint8_t> serialize_safetensors(const std::vector<StTensorOut>& tensors,
                                           const std::map<std::string, std::string>& metadata);

}  // namespace fp4moe
