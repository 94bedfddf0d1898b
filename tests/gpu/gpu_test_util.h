// GPU test support: skip where no GPU exists, device buffers with poisoning, comparisons.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fp4moe/bf16.h"
#include "fp4moe/error.h"
#include "fp4moe/hw.h"
#include "fp4moe/moe.h"
#include "kernels/common/cuda_check.h"
#include "runtime/device_buffer.h"

namespace fp4moe::test {

// The CUDA query, once per process: the gates and gpu() below read it.
inline const CudaEnvironment& cuda_environment() {
  static const CudaEnvironment env = query_cuda_environment();
  return env;
}

// Whether this process can run the GPU tests, and if not, whether that is a skip or a failure.
struct GpuTestGate {
  bool skip = false;   // no GPU on this machine: the tests report "skipped"
  bool fail = false;   // a GPU is there, or one is required, but the kernels cannot run on it
  std::string reason;  // why, where skip or fail
};

// A machine without a GPU skips; FP4MOE_GPU_TESTS_REQUIRED=1 (set by scripts/gpu_check.sh, for
// machines meant to have one) turns that into a failure. A GPU the runtime cannot use (a driver
// older than the runtime, a device it cannot query) fails: a broken setup must not read as a
// green run in which no kernel ran.
inline const GpuTestGate& gpu_presence_gate() {
  static const GpuTestGate gate = [] {
    GpuTestGate g;
    const char* required = std::getenv("FP4MOE_GPU_TESTS_REQUIRED");
    const bool must = required != nullptr && std::string(required) == "1";
    const CudaEnvironment& env = cuda_environment();
    if (!env.devices.empty()) return g;
    g.skip = env.no_gpu && !must;
    g.fail = !g.skip;
    g.reason = (env.no_gpu ? "no GPU (" : "no usable GPU (") + env.error + ")" +
               (env.no_gpu && must ? " where FP4MOE_GPU_TESTS_REQUIRED=1" : "");
    return g;
  }();
  return gate;
}

// As gpu_presence_gate, and a GPU none of this build's machine code runs on fails too (the
// reason names the target to build).
inline const GpuTestGate& gpu_test_gate() {
  static const GpuTestGate gate = [] {
    GpuTestGate g = gpu_presence_gate();
    if (g.skip || g.fail) return g;
    const BuildSupport support = build_support_for(cuda_environment().devices[0]);
    g.fail = !support.runs;
    g.reason = support.why;
    return g;
  }();
  return gate;
}

// GPU 0 as this build's kernels see it (gpu_for_build: the PTX's architecture where the driver
// JIT-compiles an earlier major version's), as the layer plans for it. After FP4MOE_REQUIRE_GPU.
inline const GpuSpec& gpu() {
  static const GpuSpec g = gpu_for_build(cuda_environment().devices.at(0));
  return g;
}

#define FP4MOE_GPU_GATE(gate_expr)                                              \
  do {                                                                         \
    const ::fp4moe::test::GpuTestGate& fp4moe_gate = (gate_expr);              \
    if (fp4moe_gate.fail) FAIL() << fp4moe_gate.reason;                        \
    if (fp4moe_gate.skip) GTEST_SKIP() << fp4moe_gate.reason;                  \
  } while (0)

// Every GPU test starts with this: "skipped" (not passed, not failed) on a machine without a
// GPU; a failure where one is present but cannot run this build's kernels (gpu_test_gate).
#define FP4MOE_REQUIRE_GPU() FP4MOE_GPU_GATE(::fp4moe::test::gpu_test_gate())
// For the tests of which builds run where: a GPU, whatever this build's machine code.
#define FP4MOE_REQUIRE_GPU_PRESENT() FP4MOE_GPU_GATE(::fp4moe::test::gpu_presence_gate())

template <typename T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(1, v.size() * sizeof(T)));
  if (!v.empty())
    FP4MOE_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

template <typename T>
std::vector<T> to_host(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  if (n) FP4MOE_CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

template <typename T>
std::vector<T> to_host(const T* p, size_t n) {
  std::vector<T> v(n);
  if (n) FP4MOE_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// Fills with 0xFF bytes: bf16 0xFFFF and fp32 0xFFFFFFFF are NaN, so an element the kernel
// forgot to write fails the comparison.
inline void poison(DeviceBuffer& b) { FP4MOE_CUDA_CHECK(cudaMemset(b.get(), 0xFF, b.bytes())); }

inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16::from_float(v[i]).bits;
  return out;
}

inline std::vector<double> bf16_to_double(const std::vector<uint16_t>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16::from_bits(v[i]).to_float();
  return out;
}

struct Comparison {
  double rel_frobenius = 0;
  double max_abs = 0;
  int64_t non_finite = 0;
  // The largest relative Frobenius error of one row (a token's output) where compare() was given
  // the row length, else 0: the whole matrix's error over T x H values can hide one token's
  // missing expert (at T = 1024, top-8, one permuted row wrong moves it by ~1e-2 at most).
  double worst_row_rel = 0;
  int64_t worst_row = -1;
  // Whether the reference rounded act to bf16 as the GPU layer does (gpu_rounding()): then the
  // tighter tolerances below apply.
  bool gpu_rounded_reference = false;
};

// The reference options that mirror the GPU layer's rounding of act (ReferenceOptions).
inline ReferenceOptions gpu_rounding() {
  ReferenceOptions o;
  o.round_act_to_bf16 = true;
  return o;
}

inline Comparison compare(const std::vector<double>& got, const std::vector<double>& ref, int64_t row = 0) {
  Comparison c;
  if (got.size() != ref.size()) {  // a wrong length fails every tolerance, and is never read past
    ADD_FAILURE() << "compare: " << got.size() << " values against the reference's " << ref.size();
    c.non_finite = 1;
    c.rel_frobenius = c.worst_row_rel = std::numeric_limits<double>::infinity();
    return c;
  }
  double num = 0, den = 0, row_num = 0, row_den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++c.non_finite;
    } else {
      const double d = got[i] - ref[i];
      num += d * d;
      den += ref[i] * ref[i];
      row_num += d * d;
      row_den += ref[i] * ref[i];
      c.max_abs = std::max(c.max_abs, std::fabs(d));
    }
    if (row > 0 && (i + 1) % row == 0) {
      const double e = row_den > 0 ? std::sqrt(row_num / row_den) : std::sqrt(row_num);
      if (e > c.worst_row_rel) {
        c.worst_row_rel = e;
        c.worst_row = static_cast<int64_t>(i / row);
      }
      row_num = row_den = 0;
    }
  }
  // A NaN or Inf anywhere fails every tolerance: an output of NaNs must not read as error 0.
  if (c.non_finite > 0) c.worst_row_rel = std::numeric_limits<double>::infinity();
  c.rel_frobenius = c.non_finite > 0 ? std::numeric_limits<double>::infinity()
                    : den > 0         ? std::sqrt(num / den)
                                      : std::sqrt(num);
  return c;
}

// Against the float64 reference of the layer's mathematics: the relative Frobenius error of the
// bf16 output, and the same of any one token's output row. A correct layer on one GPU measures
// 2.3-3.0e-3 (act, each expert's output row and the output each rounded to bf16), several GPUs
// (their partial outputs rounded and summed) up to 3.0e-3.
constexpr double kTolerance = 1e-2;
constexpr double kRowTolerance = 2e-2;
// Against the reference that rounds act to bf16 as the GPU layer does (gpu_rounding()), what is
// left is the expert rows' bf16 rounding (all families but the fused one, which sums fp32
// partials), the output's, and fp32 sums: a layer wrong by a few 1e-3 - a scale off by 0.5%, one
// K group of one tile lost - fails here where it would pass kTolerance.
constexpr double kGpuRoundedTolerance = 4e-3;
constexpr double kGpuRoundedRowTolerance = 8e-3;
// Two plans of one layer on one GPU, token by token: they differ by fp32 summation order and bf16
// rounding alone (the prefill family against the decode family on glm5: at most 1.2e-3, H100).
constexpr double kPlanRowTolerance = 5e-3;

// No non-finite value, the whole output and every token's row within the tolerances of the
// reference compared with; the failure says which and by how much.
inline ::testing::AssertionResult within_tolerance(const Comparison& c) {
  const double whole = c.gpu_rounded_reference ? kGpuRoundedTolerance : kTolerance;
  const double row = c.gpu_rounded_reference ? kGpuRoundedRowTolerance : kRowTolerance;
  const char* against = c.gpu_rounded_reference ? " (against the reference rounding act as the GPU does)" : "";
  if (c.non_finite > 0) return ::testing::AssertionFailure() << c.non_finite << " non-finite values";
  if (!(c.rel_frobenius < whole))
    return ::testing::AssertionFailure() << "relative error " << c.rel_frobenius << " >= " << whole << against;
  if (!(c.worst_row_rel < row))
    return ::testing::AssertionFailure() << "token " << c.worst_row << "'s relative error " << c.worst_row_rel << " >= "
                                         << row << " (the whole output's " << c.rel_frobenius << ")" << against;
  return ::testing::AssertionSuccess();
}

// Whether `call` throws fp4moe::Error with a message that holds `needle` (the refusal named
// for what it is, not some other check tripping first); the failure quotes what was thrown.
template <typename Call>
::testing::AssertionResult throws_error_naming(Call&& call, const std::string& needle) {
  try {
    call();
  } catch (const Error& e) {
    if (std::string(e.what()).find(needle) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "the error \"" << e.what() << "\" does not name \"" << needle << "\"";
  }
  return ::testing::AssertionFailure() << "no error; expected one naming \"" << needle << "\"";
}

}  // namespace fp4moe::test
