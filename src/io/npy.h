// NumPy .npy files (format versions 1.0-3.0): the interchange format of `fp4moe quantize`
// and `fp4moe run --input/--output`, readable by any outside tool.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fp4moe {

struct NpyArray {
  std::string descr;            // numpy dtype string: "<f4", "<f8", "|u1", "<i4", "<u2", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;   // C order, little-endian

  int64_t elements() const;
  int item_size() const;        // from descr
  int64_t data_bytes() const;   // what the shape needs of descr's items (throws on overflow)
};

// Throws fp4moe::Error naming the file and what is wrong (bad magic, unsupported dtype,
// Fortran order, truncated data). `check_header`, where given, sees the array's dtype and shape
// (its bytes still empty) before any data is read: a caller's shape or memory check then
// refuses a file before a large read, not after it.
NpyArray read_npy(const std::string& path, const std::function<void(const NpyArray&)>& check_header = {});
// A shape as numpy writes it: (2, 100), (7,), ().
std::string npy_shape_string(const std::vector<int64_t>& shape);
void write_npy(const std::string& path, const NpyArray& a);

// Float conversions of the numeric dtypes we accept: <f4, <f8, <f2 (IEEE half), and <V2 read
// as bfloat16 (how NumPy saves ml_dtypes.bfloat16 arrays).
std::vector<float> npy_to_float(const NpyArray& a, const std::string& what);
NpyArray npy_from_float(const std::vector<float>& v, std::vector<int64_t> shape);
NpyArray npy_from_bf16(const std::vector<uint16_t>& v, std::vector<int64_t> shape);  // "<V2"
NpyArray npy_from_bytes(const std::vector<uint8_t>& v, std::vector<int64_t> shape);

}  // namespace fp4moe
