// fp4moe quantize IN.npy OUT: an fp32 (or f64/f16) matrix to NVFP4 (ModelOpt recipe) or
// MXFP4, written as one safetensors file (OUT ends in .safetensors) or as .npy files
// OUT.weight.npy, OUT.weight_scale.npy, OUT.weight_scale_2.npy; then the error report.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/validators.h"
#include "common/host_memory.h"
#include "fp4moe/error.h"
#include "fp4moe/format.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/text_file.h"

namespace fp4moe::cli {
namespace {

struct QuantizeArgs {
  std::string input, output, format = "nvfp4";
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<uint8_t> float_bytes(float f) {
  std::vector<uint8_t> b(4);
  std::memcpy(b.data(), &f, 4);
  return b;
}

void run_quantize(const QuantizeArgs& a) {
  // A prefix names files: an empty one or a directory ("out/") would write hidden ".weight.npy"s.
  const std::filesystem::path name = std::filesystem::path(a.output).filename();  // "" for "" and "dir/"
  FP4MOE_CHECK(!name.empty() && name != "." && name != "..", "output '", a.output, "': give FILE.safetensors or a file name prefix (PREFIX.weight.npy, ...), not a directory");
  // Where the result goes, every file of it, checked before the work (the .npy form writes
  // OUT.<tensor>.npy); none may be the input, which it would overwrite.
  std::vector<std::string> outputs = {a.output};
  if (!ends_with(a.output, ".safetensors")) {
    outputs = {a.output + ".weight.npy", a.output + ".weight_scale.npy"};
    if (a.format == "nvfp4") outputs.push_back(a.output + ".weight_scale_2.npy");
  }
  for (const std::string& path : outputs) {
    require_writable_path(path, "output");
    require_not_same_file(a.input, path, "output");
  }
  const int64_t block = a.format == "nvfp4" ? kNvfp4BlockSize : kMxfp4BlockSize;
  const NpyArray in = read_npy(a.input, [&](const NpyArray& head) {  // before its data is read
    FP4MOE_CHECK(head.shape.size() == 2, a.input, ": expected a 2-D matrix [N, K], got ", head.shape.size(),
                 " dimensions");
    FP4MOE_CHECK(head.shape[0] >= 1 && head.shape[1] >= 1, a.input, ": the matrix ",
                 npy_shape_string(head.shape), " is empty");
    FP4MOE_CHECK(head.shape[1] % block == 0, a.input, ": K = ", head.shape[1], " is not a multiple of the block size ",
                 block, " (", a.format, ")");
    // The input, its fp32 copy and the dequantized fp32 matrix for the error, the packed result.
    const double n = static_cast<double>(head.elements());
    require_host_memory(n * (head.item_size() + 4 + 4 + 1), a.input + ": quantizing its " +
                                                                  npy_shape_string(head.shape) + " matrix");
  });
  const int64_t rows = in.shape[0], cols = in.shape[1];
  const std::vector<float> w = npy_to_float(in, a.input);
  // Named by the file and the element here; the quantizer's own check names only its argument.
  for (size_t i = 0; i < w.size(); ++i)
    FP4MOE_CHECK(std::isfinite(w[i]), a.input, ": element ", i, " (row ", i / static_cast<size_t>(cols), ", column ",
                 i % static_cast<size_t>(cols), ") is ", w[i], ": only finite values quantize");
  std::vector<float> deq;
  std::vector<StTensorOut> out;
  if (a.format == "nvfp4") {
    const Nvfp4Matrix q = quantize_nvfp4(w, rows, cols);
    deq = q.dequantize();
    out = {{"weight", StDtype::kU8, {rows, cols / 2}, q.data},
           {"weight_scale", StDtype::kF8E4M3, {rows, cols / 16}, q.block_scales},
           {"weight_scale_2", StDtype::kF32, {}, float_bytes(q.global_scale)}};
  } else {
    const Mxfp4Matrix q = quantize_mxfp4(w, rows, cols);
    deq = q.dequantize();
    out = {{"weight", StDtype::kU8, {rows, cols / 2}, q.data},
           {"weight_scale", StDtype::kF8E8M0, {rows, cols / 32}, q.block_scales}};
  }
  if (ends_with(a.output, ".safetensors")) {
    write_safetensors(a.output, out, {{"format", a.format}, {"producer", "fp4moe"}});
    std::printf("wrote %s (%zu tensors)\n", a.output.c_str(), out.size());
  } else {
    for (const auto& t : out) {
      const std::string path = a.output + "." + t.name + ".npy";
      NpyArray arr;
      arr.descr = t.dtype == StDtype::kF32 ? "<f4" : "|u1";
      arr.shape = t.shape;
      arr.bytes = t.bytes;
      write_npy(path, arr);
      std::printf("wrote %s (%s as %s)\n", path.c_str(), to_string(t.dtype), arr.descr.c_str());
    }
  }
  const QuantError e = quantization_error(w, deq);
  std::printf("%s [%lld, %lld]: relative error %.4e, max abs error %.4e, rmse %.4e\n",
              a.format.c_str(), static_cast<long long>(rows), static_cast<long long>(cols),
              e.rel_frobenius, e.max_abs, e.rmse);
}

}  // namespace

void register_quantize(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  auto* cmd = app.add_subcommand("quantize", "Quantize a matrix (.npy) to NVFP4 or MXFP4");
  cmd->add_option("input", args->input, "Input matrix [N, K] (.npy: f32, f64, f16, or bf16 as <V2)")
      ->required()
      ->check(NonEmptyPath);
  cmd->add_option("output", args->output,
                  "Output: FILE.safetensors, or a prefix for PREFIX.<tensor>.npy files")
      ->required()
      ->check(NonEmptyPath);
  cmd->add_option("--format", args->format, "nvfp4 (ModelOpt recipe) or mxfp4 (OCP MX)")
      ->check(CLI::IsMember({"nvfp4", "mxfp4"}));
  cmd->callback([args] { run_quantize(*args); });
}

}  // namespace fp4moe::cli
