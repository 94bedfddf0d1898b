// safetensors reader (memory-mapped, validating) and writer.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fp4moe/error.h"
#include "io/json_document.h"
#include "io/text_file.h"

namespace fp4moe {
namespace {

struct DtypeInfo {
  StDtype dtype;
  const char* name;
  int bits;
};
constexpr DtypeInfo kDtypes[] = {
    {StDtype::kBool, "BOOL", 8},       {StDtype::kU8, "U8", 8},
    {StDtype::kI8, "I8", 8},           {StDtype::kF8E4M3, "F8_E4M3", 8},
    {StDtype::kF8E5M2, "F8_E5M2", 8},  {StDtype::kF8E8M0, "F8_E8M0", 8},
    {StDtype::kF4, "F4", 4},           {StDtype::kI16, "I16", 16},
    {StDtype::kU16, "U16", 16},        {StDtype::kF16, "F16", 16},
    {StDtype::kBF16, "BF16", 16},      {StDtype::kI32, "I32", 32},
    {StDtype::kU32, "U32", 32},        {StDtype::kF32, "F32", 32},
    {StDtype::kI64, "I64", 64},        {StDtype::kU64, "U64", 64},
    {StDtype::kF64, "F64", 64},        {StDtype::kF6E2M3, "F6_E2M3", 6},
    {StDtype::kF6E3M2, "F6_E3M2", 6},  {StDtype::kC64, "C64", 64},
};

// Header sizes beyond this are refused (the reference implementation's limit is 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

// Bytes of `elements` values of `d`, or -1 on a negative dimension, overflow or a fractional
// byte count.
int64_t tensor_bytes(StDtype d, const std::vector<int64_t>& shape) {
  __int128 n = 1;
  for (int64_t s : shape) {
    if (s < 0) return -1;
    n *= s;
    if (n > (static_cast<__int128>(1) << 62)) return -1;
  }
  const __int128 bits = n * st_dtype_bits(d);
  if (bits % 8 || bits / 8 > (static_cast<__int128>(1) << 62)) return -1;
  return static_cast<int64_t>(bits / 8);
}

}  // namespace

const char* to_string(StDtype d) {
  for (const auto& i : kDtypes)
    if (i.dtype == d) return i.name;
  return "?";
}

StDtype st_dtype_from_string(const std::string& s, const std::string& context) {
  for (const auto& i : kDtypes)
    if (s == i.name) return i.dtype;
  FP4MOE_FAIL(context, ": unknown dtype '", s, "'");
}

int st_dtype_bits(StDtype d) {
  for (const auto& i : kDtypes)
    if (i.dtype == d) return i.bits;
  return 0;
}

int64_t StTensorView::elements() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  std::vector<uint8_t> owned;  // in-memory images
  ~Mapping() {
    if (addr && addr != MAP_FAILED) munmap(addr, size);
  }
};

SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = std::make_unique<Mapping>();
  require_regular_file(path);  // before open(): a FIFO would block it
  const int fd = ::open(path.c_str(), O_RDONLY);
  FP4MOE_CHECK(fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    FP4MOE_FAIL(path, ": cannot stat");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    FP4MOE_CHECK(addr != MAP_FAILED, path, ": mmap failed (", std::strerror(errno), ")");
    f.mapping_->addr = addr;
    f.mapping_->size = size;
    f.image_ = {static_cast<const uint8_t*>(addr), size};
  } else {
    ::close(fd);
  }
  f.parse(path);
  return f;
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<uint8_t> image, const std::string& name) {
  SafetensorsFile f;
  f.path_ = name;
  f.mapping_ = std::make_unique<Mapping>();
  f.mapping_->owned = std::move(image);
  f.image_ = {f.mapping_->owned.data(), f.mapping_->owned.size()};
  f.parse(name);
  return f;
}

void SafetensorsFile::parse(const std::string& label) {
  FP4MOE_CHECK(image_.size() >= 8, label, ": truncated safetensors file (", image_.size(),
               " bytes, the header length alone needs 8)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(image_[i]) << (8 * i);
  FP4MOE_CHECK(n <= kMaxHeaderBytes, label, ": header length ", n,
               " exceeds the 100 MB limit (not a safetensors file? it begins with an 8-byte header length)");
  FP4MOE_CHECK(n <= image_.size() - 8, label, ": header length ", n, " runs past the end of the ",
               image_.size(), "-byte file (truncated?)");
  FP4MOE_CHECK(n >= 2 && image_[8] == '{', label, ": header does not start with '{'");
  const char* hb = reinterpret_cast<const char*>(image_.data() + 8);
  const nlohmann::json header = parse_json_document(std::string_view(hb, n), label + ": header");
  FP4MOE_CHECK(header.is_object(), label, ": header is not a JSON object");
  const std::span<const uint8_t> buffer = image_.subspan(8 + n);
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      FP4MOE_CHECK(it->is_object(), label, ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        FP4MOE_CHECK(m->is_string(), label, ": __metadata__ value of '", m.key(),
                     "' is not a string");
        metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string ctx = label + ": tensor '" + name + "'";
    const auto& e = *it;
    FP4MOE_CHECK(e.is_object(), ctx, ": entry is not an object");
    FP4MOE_CHECK(e.contains("dtype") && e["dtype"].is_string(), ctx, ": missing string 'dtype'");
    FP4MOE_CHECK(e.contains("shape") && e["shape"].is_array(), ctx, ": missing array 'shape'");
    FP4MOE_CHECK(e.contains("data_offsets") && e["data_offsets"].is_array() &&
                     e["data_offsets"].size() == 2,
                 ctx, ": 'data_offsets' must be [begin, end]");
    StTensorView v;
    v.name = name;
    v.dtype = st_dtype_from_string(e["dtype"].get<std::string>(), ctx);
    for (const auto& d : e["shape"]) {
      FP4MOE_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0),
                   ctx, ": shape entries must be non-negative integers");
      FP4MOE_CHECK(d.get<uint64_t>() < (uint64_t{1} << 62), ctx, ": dimension too large");
      v.shape.push_back(d.get<int64_t>());
    }
    const auto& off = e["data_offsets"];
    FP4MOE_CHECK(off[0].is_number_unsigned() && off[1].is_number_unsigned(), ctx,
                 ": data_offsets must be non-negative integers");
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    FP4MOE_CHECK(b <= en, ctx, ": data_offsets [", b, ", ", en, ") are reversed");
    FP4MOE_CHECK(en <= buffer.size(), ctx, ": data_offsets [", b, ", ", en,
                 ") run past the data buffer of ", buffer.size(), " bytes (truncated file?)");
    const int64_t need = tensor_bytes(v.dtype, v.shape);
    FP4MOE_CHECK(need >= 0, ctx, ": shape x dtype size is not a whole number of bytes or overflows");
    FP4MOE_CHECK(static_cast<uint64_t>(need) == en - b, ctx, ": shape x dtype needs ", need,
                 " bytes but data_offsets span ", en - b);
    v.bytes = buffer.subspan(b, en - b);
    spans.emplace_back(b, en);
    tensors_.emplace(name, std::move(v));
  }
  // The tensors tile the data buffer exactly, as the format requires (and the reference library
  // checks): no overlap, and no byte that belongs to no tensor - a hole or a tail could carry
  // another file's content (a polyglot) or betray a header that lost an entry.
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;  // the tensors so far tile [0, covered)
  for (const auto& [b, en] : spans) {
    FP4MOE_CHECK(b >= covered, label, ": tensors' data_offsets overlap at byte ", b);
    FP4MOE_CHECK(b == covered, label, ": bytes [", covered, ", ", b,
                 ") of the data buffer belong to no tensor (the format leaves no holes)");
    covered = en;
  }
  FP4MOE_CHECK(covered == buffer.size(), label, ": the data buffer's last ", buffer.size() - covered,
               " bytes (from byte ", covered, ") belong to no tensor");
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : tensors_) out.push_back(k);
  return out;
}

const StTensorView& SafetensorsFile::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  FP4MOE_CHECK(it != tensors_.end(), path_, ": missing tensor '", name, "'");
  return it->second;
}

int64_t st_tensor_bytes(StDtype d, const std::vector<int64_t>& shape) { return tensor_bytes(d, shape); }

namespace {
// The header (length prefix + JSON, space-padded to 8 bytes) for tensors laid out in order.
std::string header_for(const std::vector<StTensorMeta>& tensors,
                       const std::map<std::string, std::string>& metadata, uint64_t* data_bytes) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<std::string> seen;
  for (const auto& t : tensors) {
    FP4MOE_CHECK(t.name != "__metadata__" && !t.name.empty(), "safetensors: bad tensor name '", t.name, "'");
    FP4MOE_CHECK(std::find(seen.begin(), seen.end(), t.name) == seen.end(), "safetensors: duplicate tensor '",
                 t.name, "'");
    seen.push_back(t.name);
    const int64_t need = tensor_bytes(t.dtype, t.shape);
    FP4MOE_CHECK(need >= 0, "safetensors: tensor '", t.name, "' shape is not a whole number of bytes");
    header[t.name] = {{"dtype", to_string(t.dtype)}, {"shape", t.shape},
                      {"data_offsets", {offset, offset + static_cast<uint64_t>(need)}}};
    offset += need;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  *data_bytes = offset;
  return out + h;
}
}  // namespace

std::vector<uint8_t> serialize_safetensors(const std::vector<StTensorOut>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  std::vector<StTensorMeta> meta;
  for (const auto& t : tensors) {
    const int64_t need = tensor_bytes(t.dtype, t.shape);
    FP4MOE_CHECK(need >= 0, "safetensors: tensor '", t.name, "' has a negative dimension, or its ",
                 to_string(t.dtype), " size overflows or is not a whole number of bytes");
    FP4MOE_CHECK(need == static_cast<int64_t>(t.bytes.size()), "safetensors: tensor '", t.name,
                 "' shape x dtype needs ", need, " bytes, got ", t.bytes.size());
    meta.push_back({t.name, t.dtype, t.shape});
  }
  uint64_t data = 0;
  const std::string h = header_for(meta, metadata, &data);
  std::vector<uint8_t> out(h.begin(), h.end());
  out.reserve(h.size() + data);
  for (const auto& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<StTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::vector<uint8_t> image = serialize_safetensors(tensors, metadata);
  std::ofstream f(path, std::ios::binary);
  FP4MOE_CHECK(f.good(), path, ": cannot open for writing");
  f.write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
  close_checked(f, path);
}

void write_safetensors_streamed(const std::string& path, const std::vector<StTensorMeta>& tensors,
                                const std::function<void(size_t, std::ostream&)>& write_data,
                                const std::map<std::string, std::string>& metadata) {
  uint64_t data = 0;
  const std::string h = header_for(tensors, metadata, &data);
  std::ofstream f(path, std::ios::binary);
  FP4MOE_CHECK(f.good(), path, ": cannot open for writing");
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto before = f.tellp();
    write_data(i, f);
    FP4MOE_CHECK(f.good(), path, ": write failed at tensor '", tensors[i].name, "'");
    FP4MOE_CHECK(f.tellp() - before == tensor_bytes(tensors[i].dtype, tensors[i].shape), path, ": tensor '",
                 tensors[i].name, "' wrote ", static_cast<int64_t>(f.tellp() - before), " bytes, its shape needs ",
                 tensor_bytes(tensors[i].dtype, tensors[i].shape));
  }
  close_checked(f, path);
}

}  // namespace fp4moe
