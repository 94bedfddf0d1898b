// GPU test support: skip where no GPU exists, device buffers with poisoning, comparisons.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fp4moe/bf16.h"
#include "fp4moe/hw.h"
#include "kernels/common/cuda_check.h"
#include "runtime/device_buffer.h"

namespace fp4moe::test {

// Empty where GPU 0 runs this build's kernels; else why not: no GPU, or none of the build's
// machine code runs on it (the run targets and the one to build are named).
inline const std::string& gpu_unavailable_reason() {
  static const std::string why = [] {
    const CudaEnvironment env = query_cuda_environment();
    if (env.devices.empty()) return std::string("no GPU");
    const BuildSupport support = build_support_for(env.devices[0]);
    return support.runs ? std::string() : support.why;
  }();
  return why;
}

inline bool gpu_available() { return gpu_unavailable_reason().empty(); }

// GPU 0 as this build's kernels see it (gpu_for_build: the PTX's architecture where the driver
// JIT-compiles an earlier major version's), as the layer plans for it. After FP4MOE_REQUIRE_GPU.
inline const GpuSpec& gpu() {
  static const GpuSpec g = gpu_for_build(query_cuda_environment().devices.at(0));
  return g;
}

// Every GPU test starts with this: "skipped" (not passed, not failed) without a GPU, or on one
// this build has no machine code for.
#define FP4MOE_REQUIRE_GPU()                                                                  \
  do {                                                                                        \
    if (!::fp4moe::test::gpu_available()) GTEST_SKIP() << ::fp4moe::test::gpu_unavailable_reason(); \
  } while (0)

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
};

inline Comparison compare(const std::vector<double>& got, const std::vector<double>& ref, int64_t row = 0) {
  Comparison c;
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

}  // namespace fp4moe::test
