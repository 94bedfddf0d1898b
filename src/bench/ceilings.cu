// Read-bandwidth and cuBLAS BF16 ceilings (see ceilings.h).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "bench/ceilings.h"
#include "bench/cublas_check.h"
#include "fp4moe/error.h"
#include "runtime/device_buffer.h"

namespace fp4moe {
namespace {

// Each thread streams 16-byte loads, four in flight, and folds them into one word; the
// (never true) comparison keeps the loads alive without writing memory.
__global__ void read_stream(const uint4* __restrict__ p, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
                d = __ldcs(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldcs(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

__global__ void fill_random_bf16(__nv_bfloat16* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    p[i] = __float2bfloat16((static_cast<float>(h & 0xFFFF) / 65536.0f) - 0.5f);
  }
}

__global__ void write_stream(uint4* p, int64_t n, uint32_t v) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = make_uint4(v, v + 1, v + 2, v + 3);
}

int sm_count() {
  int dev = 0, sms = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

auto nothing = [] {};

}  // namespace

double measure_read_bandwidth(int64_t bytes, int iters) {
  DeviceBuffer buf(bytes), sink(4);
  const int64_t n = bytes / 16;
  write_stream<<<sm_count() * 8, 256>>>(buf.get<uint4>(), n, 7);
  FP4MOE_CUDA_CHECK_LAUNCH();
  const int grid = sm_count() * 8;
  const double s = median_event_time(2, iters, nullptr, [&] {
    read_stream<<<grid, 512>>>(buf.get<uint4>(), n, sink.get<uint32_t>());
    FP4MOE_CUDA_CHECK_LAUNCH();
  }, nothing);
  return static_cast<double>(n * 16) / s;
}

double measure_cublas_bf16_flops(int n, int iters) {
  const int64_t elems = static_cast<int64_t>(n) * n;
  DeviceBuffer a(elems * 2), b(elems * 2), c(elems * 2);
  fill_random_bf16<<<sm_count() * 8, 256>>>(a.get<__nv_bfloat16>(), elems, 1);
  fill_random_bf16<<<sm_count() * 8, 256>>>(b.get<__nv_bfloat16>(), elems, 2);
  FP4MOE_CUDA_CHECK_LAUNCH();
  cublasHandle_t h;
  FP4MOE_CUBLAS_CHECK(cublasCreate(&h));
  const float alpha = 1.0f, beta = 0.0f;
  const double s = median_event_time(3, iters, nullptr, [&] {
    FP4MOE_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.get(),
                                     CUDA_R_16BF, n, b.get(), CUDA_R_16BF, n, &beta, c.get(),
                                     CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }, nothing);
  cublasDestroy(h);
  return 2.0 * n * static_cast<double>(n) * n / s;
}

Ceilings measure_ceilings(int iters, ClockMonitor* monitor) {
  Ceilings c;
  c.read_buffer_bytes = int64_t{4} << 30;  // 4 GiB: 70x the H200's L2
  c.gemm_size = 8192;
  c.read_bytes_per_s = measure_read_bandwidth(c.read_buffer_bytes, iters);
  if (monitor) monitor->start();
  c.bf16_flops = measure_cublas_bf16_flops(c.gemm_size, iters);
  if (monitor) c.bf16_clock = monitor->stop();
  return c;
}

}  // namespace fp4moe
