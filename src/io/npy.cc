// .npy reader and writer (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html)
#include "io/npy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fp4moe/error.h"
#include "io/text_file.h"

namespace fp4moe {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// as numpy writes it, but any literal numpy's own reader (ast.literal_eval) takes is read here:
// keys in single or double quotes, any whitespace around the separators, a trailing comma or none.
// Each value comes back as its raw text, trimmed, up to the next top-level ',' or '}'.
std::map<std::string, std::string> header_dict(const std::string& header, const std::string& path) {
  const auto malformed = [&](const char* what) {
    FP4MOE_FAIL(path, ": malformed .npy header (", what, "): ", header.substr(0, 120), header.size() > 120 ? "..." : "");
  };
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t p = 0;
  const auto skip_space = [&] { while (p < header.size() && is_space(header[p])) ++p; };
  // A quoted string starting at p; p is left past its closing quote.
  const auto quoted = [&]() -> std::string {
    const char q = header[p];
    const size_t close = header.find(q, p + 1);
    if (close == std::string::npos) malformed("an unterminated string");
    std::string text = header.substr(p + 1, close - p - 1);
    p = close + 1;
    return text;
  };
  skip_space();
  if (p >= header.size() || header[p] != '{') malformed("no '{'");
  ++p;
  std::map<std::string, std::string> dict;
  for (;;) {
    skip_space();
    if (p < header.size() && header[p] == '}') break;
    if (p >= header.size() || (header[p] != '\'' && header[p] != '"')) malformed("a key is not a quoted string");
    const std::string key = quoted();
    skip_space();
    if (p >= header.size() || header[p] != ':') malformed("no ':' after a key");
    ++p;
    skip_space();
    const size_t begin = p;
    int depth = 0;
    for (; p < header.size(); ++p) {
      const char c = header[p];
      if (c == '\'' || c == '"') {
        quoted();
        --p;  // the loop's ++p steps past the closing quote
        continue;
      }
      if (c == '(' || c == '[') ++depth;
      if (c == ')' || c == ']') --depth;
      if (depth < 0 || (depth == 0 && (c == ',' || c == '}'))) break;
    }
    if (p >= header.size() || depth != 0) malformed("a value is not closed");
    size_t end = p;
    while (end > begin && is_space(header[end - 1])) --end;
    if (!dict.emplace(key, header.substr(begin, end - begin)).second) malformed("a key given twice");
    if (header[p] == ',') ++p;
  }
  ++p;
  skip_space();
  if (p != header.size()) malformed("text after the '}'");
  return dict;
}

// Value of `key` in the header dict.
const std::string& dict_value(const std::map<std::string, std::string>& dict, const std::string& key,
                              const std::string& path) {
  const auto it = dict.find(key);
  FP4MOE_CHECK(it != dict.end(), path, ": .npy header has no '", key, "' entry");
  return it->second;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

// An array of `descr` items holding v's bytes as they lie in memory: little-endian, as the
// descriptors say.
template <typename T>
NpyArray npy_from_items(const char* descr, const std::vector<T>& v, std::vector<int64_t> shape) {
  static_assert(std::endian::native == std::endian::little, ".npy items are written in host order");
  NpyArray a;
  a.descr = descr;
  a.shape = std::move(shape);
  a.bytes.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
  return a;
}

// An array's bytes against what its shape needs: where they disagree, a read would run past them
// and a written file would be one no reader takes.
void check_bytes_hold_shape(const NpyArray& a, const std::string& what) {
  const int64_t need = a.data_bytes();
  FP4MOE_CHECK(static_cast<int64_t>(a.bytes.size()) == need, what, ": ", a.bytes.size(), " bytes do not hold the shape ",
               npy_shape_string(a.shape), " of '", a.descr, "' (it needs ", need, ")");
}

}  // namespace

int64_t NpyArray::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n = checked_size(n, d, ".npy shape");
  return n;
}

int64_t NpyArray::data_bytes() const { return checked_size(elements(), item_size(), ".npy size"); }

int NpyArray::item_size() const {
  // "<f4", "|u1", "<V2": byte order, kind, then the item size in bytes.
  int size = 0;
  const bool digits = descr.size() >= 3 && descr.size() <= 4 &&
                      std::all_of(descr.begin() + 2, descr.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) size = std::stoi(descr.substr(2));
  FP4MOE_CHECK(digits && size >= 1 && size <= 16, "bad .npy dtype '", descr, "'");
  return size;
}

NpyArray read_npy(const std::string& path, const std::function<void(const NpyArray&)>& check_header) {
  if (path_kind(path) != PathKind::kMissing) require_regular_file(path);  // a FIFO would block the open
  std::ifstream f(path, std::ios::binary);
  FP4MOE_CHECK(f.good(), path, ": cannot open");
  char magic[6];
  f.read(magic, 6);
  FP4MOE_CHECK(f.gcount() == 6 && std::memcmp(magic, kMagic, 6) == 0, path,
               ": not a .npy file (bad magic)");
  uint8_t version[2];
  f.read(reinterpret_cast<char*>(version), 2);
  FP4MOE_CHECK(f.gcount() == 2 && version[0] >= 1 && version[0] <= 3, path,
               ": unsupported .npy version ", int(version[0]));
  uint32_t header_len = 0;
  if (version[0] == 1) {
    uint8_t b[2];
    f.read(reinterpret_cast<char*>(b), 2);
    FP4MOE_CHECK(f.gcount() == 2, path, ": truncated .npy header");
    header_len = b[0] | (b[1] << 8);
  } else {
    uint8_t b[4];
    f.read(reinterpret_cast<char*>(b), 4);
    FP4MOE_CHECK(f.gcount() == 4, path, ": truncated .npy header");
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  }
  FP4MOE_CHECK(header_len < (1u << 20), path, ": .npy header length ", header_len, " is implausible");
  std::string header(header_len, '\0');
  f.read(header.data(), header_len);
  FP4MOE_CHECK(f.gcount() == static_cast<std::streamsize>(header_len), path,
               ": truncated .npy header");

  NpyArray a;
  const std::map<std::string, std::string> dict = header_dict(header, path);
  const std::string& descr = dict_value(dict, "descr", path);
  FP4MOE_CHECK(descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"'), path,
               ": .npy dtype ", descr, " is not a simple dtype (structured arrays unsupported)");
  a.descr = descr.substr(1, descr.size() - 2);
  const std::string& fortran = dict_value(dict, "fortran_order", path);
  FP4MOE_CHECK(fortran == "False", path, ": Fortran-ordered .npy arrays are not supported");
  const std::string& shape = dict_value(dict, "shape", path);
  FP4MOE_CHECK(shape.size() >= 2 && shape.front() == '(' && shape.back() == ')', path,
               ": malformed .npy shape ", shape);
  std::stringstream ss(shape.substr(1, shape.size() - 2));
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(' ');
    if (b == std::string::npos) continue;
    try {
      const std::string digits = item.substr(b, item.find_last_not_of(' ') + 1 - b);
      size_t used = 0;
      const int64_t d = std::stoll(digits, &used);
      FP4MOE_CHECK(used == digits.size(), path, ": malformed .npy shape ", shape);
      FP4MOE_CHECK(d >= 0, path, ": negative dimension in .npy shape");
      a.shape.push_back(d);
    } catch (const std::logic_error&) {
      FP4MOE_FAIL(path, ": malformed .npy shape ", shape);
    }
  }
  FP4MOE_CHECK(a.descr.size() >= 3 && a.descr[0] != '>', path, ": .npy dtype '", a.descr, "' is big-endian");
  FP4MOE_CHECK(a.descr[0] == '<' || a.descr[0] == '|', path, ": .npy dtype '", a.descr,
               "' is not a plain numeric type (object and structured arrays are not read)");
  try {
    a.item_size();
  } catch (const Error& e) {
    FP4MOE_FAIL(path, ": ", e.what());
  }
  int64_t nbytes = 0;
  try {
    nbytes = a.data_bytes();
  } catch (const Error& e) {
    FP4MOE_FAIL(path, ": shape ", npy_shape_string(a.shape), ": ", e.what());
  }
  FP4MOE_CHECK(nbytes >= 0 && nbytes < (int64_t{1} << 40), path, ": implausible .npy size");
  if (check_header) check_header(a);
  // The shape's bytes must be in the file before they are allocated.
  const std::streampos data_begin = f.tellg();
  f.seekg(0, std::ios::end);
  const int64_t present = static_cast<int64_t>(f.tellg() - data_begin);
  f.seekg(data_begin);
  FP4MOE_CHECK(present >= nbytes, path, ": truncated .npy data (its shape ", npy_shape_string(a.shape), " needs ",
               nbytes, " bytes, the file holds ", present, ")");
  a.bytes.resize(static_cast<size_t>(nbytes));
  f.read(reinterpret_cast<char*>(a.bytes.data()), nbytes);
  FP4MOE_CHECK(f.gcount() == nbytes, path, ": truncated .npy data (expected ", nbytes,
               " bytes, found ", f.gcount(), ")");
  return a;
}

std::string npy_shape_string(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) s += ",";
    if (i + 1 < shape.size()) s += " ";
  }
  return s + ")";
}

void write_npy(const std::string& path, const NpyArray& a) {
  check_bytes_hold_shape(a, path);
  std::string header =
      "{'descr': '" + a.descr + "', 'fortran_order': False, 'shape': " + npy_shape_string(a.shape) + ", }";
  const size_t unpadded = 6 + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  FP4MOE_CHECK(f.good(), path, ": cannot open for writing");
  f.write(kMagic, 6);
  const char version[2] = {1, 0};
  f.write(version, 2);
  // Version 1.0 gives the header 16 bits (a shape of thousands of dimensions would wrap).
  FP4MOE_CHECK(header.size() <= 0xFFFF, path, ": the .npy header of ", header.size(), " bytes exceeds version 1.0's 65535");
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char lenb[2] = {static_cast<char>(len & 0xFF), static_cast<char>(len >> 8)};
  f.write(lenb, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(a.bytes.data()), static_cast<std::streamsize>(a.bytes.size()));
  close_checked(f, path);
}

std::vector<float> npy_to_float(const NpyArray& a, const std::string& what) {
  check_bytes_hold_shape(a, what);
  const int64_t n = a.elements();
  std::vector<float> v(static_cast<size_t>(n));
  if (a.descr == "<f4") {
    if (n > 0) std::memcpy(v.data(), a.bytes.data(), static_cast<size_t>(n) * 4);
  } else if (a.descr == "<f8") {
    for (int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, a.bytes.data() + i * 8, 8);
      // A finite value past float's range would read as infinity, and be reported as one.
      FP4MOE_CHECK(!std::isfinite(d) || std::fabs(d) <= std::numeric_limits<float>::max(), what, ": element ", i,
                   " is ", d, ", beyond float32's range");
      v[i] = static_cast<float>(d);
    }
  } else if (a.descr == "<V2" || a.descr == "|V2") {
    // bfloat16: ml_dtypes' bfloat16 arrays are saved as 2-byte void items.
    for (int64_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, a.bytes.data() + i * 2, 2);
      v[i] = std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
    }
  } else if (a.descr == "<f2") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, a.bytes.data() + i * 2, 2);
      v[i] = half_to_float(h);
    }
  } else {
    FP4MOE_FAIL(what, ": dtype '", a.descr, "' is not a float type (expected <f4, <f8, <f2, or <V2 for bfloat16)");
  }
  return v;
}

NpyArray npy_from_float(const std::vector<float>& v, std::vector<int64_t> shape) {
  return npy_from_items("<f4", v, std::move(shape));
}

NpyArray npy_from_bf16(const std::vector<uint16_t>& v, std::vector<int64_t> shape) {
  return npy_from_items("<V2", v, std::move(shape));
}

NpyArray npy_from_bytes(const std::vector<uint8_t>& v, std::vector<int64_t> shape) {
  return npy_from_items("|u1", v, std::move(shape));
}

}  // namespace fp4moe
