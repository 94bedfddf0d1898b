// Read-bandwidth and cuBLAS BF16 ceilings (see ceilings.h).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <chrono>

#include "bench/ceilings.h"
#include "bench/plain_read.h"
#include "bench/cublas_api.h"
#include "bench/cublas_check.h"
#include "fp4moe/error.h"
#include "runtime/device_buffer.h"
#include "runtime/gpu_wake.h"

namespace fp4moe {
namespace {

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
    launch_read_stream(buf.get(), n * 16, grid, sink.get<uint32_t>(), nullptr);
  }, nothing);
  return static_cast<double>(n * 16) / s;
}

namespace {

// One n x n x n BF16 GEMM (fp32 accumulation) on random data, timed; run() keeps the tensor
// cores busy for a while first, so that the GPU settles at the clock its power cap allows.
class Bf16Gemm {
 public:
  explicit Bf16Gemm(int n) : n_(n), a_(bytes(n)), b_(bytes(n)), c_(bytes(n)) {
    const int64_t elems = static_cast<int64_t>(n) * n;
    fill_random_bf16<<<sm_count() * 8, 256>>>(a_.get<__nv_bfloat16>(), elems, 1);
    fill_random_bf16<<<sm_count() * 8, 256>>>(b_.get<__nv_bfloat16>(), elems, 2);
    FP4MOE_CUDA_CHECK_LAUNCH();
    FP4MOE_CUBLAS_CHECK(cublas_.create(&h_));
  }
  ~Bf16Gemm() { cublas_.destroy(h_); }
  Bf16Gemm(const Bf16Gemm&) = delete;
  Bf16Gemm& operator=(const Bf16Gemm&) = delete;

  void run() {
    const float alpha = 1.0f, beta = 0.0f;
    FP4MOE_CUBLAS_CHECK(cublas_.gemm_ex(h_, CUBLAS_OP_N, CUBLAS_OP_N, n_, n_, n_, &alpha, a_.get(), CUDA_R_16BF, n_,
                                     b_.get(), CUDA_R_16BF, n_, &beta, c_.get(), CUDA_R_16BF, n_,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  // Back-to-back GEMMs for `seconds` of wall time (batches of 16 between host checks).
  void run_for(double seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
      for (int i = 0; i < 16; ++i) run();
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    }
  }
  double flops_per_s(int warmup, int iters) {
    const double s = median_event_time(warmup, iters, nullptr, [&] { run(); }, nothing);
    return 2.0 * n_ * static_cast<double>(n_) * n_ / s;
  }

 private:
  static int64_t bytes(int n) { return static_cast<int64_t>(n) * n * 2; }
  const CublasApi& cublas_ = CublasApi::get();  // (loaded before the buffers: a missing library costs no GPU work)
  int n_;
  DeviceBuffer a_, b_, c_;
  cublasHandle_t h_ = nullptr;
};

}  // namespace

Ceilings measure_ceilings(int iters, ClockMonitor* monitor, double sustain_seconds) {
  Ceilings c;
  c.read_buffer_bytes = int64_t{4} << 30;  // 4 GiB: 70x the H200's L2
  c.gemm_size = 8192;
  wake_gpu();
  c.read_bytes_per_s = measure_read_bandwidth(c.read_buffer_bytes, iters);
  Bf16Gemm gemm(c.gemm_size);
  if (monitor) monitor->start();
  c.bf16_flops = gemm.flops_per_s(3, iters);
  if (monitor) c.bf16_clock = monitor->stop();
  if (sustain_seconds > 0) {
    gemm.run_for(sustain_seconds);
    if (monitor) monitor->start();
    c.bf16_flops_sustained = gemm.flops_per_s(0, 3 * iters);
    if (monitor) c.bf16_sustained_clock = monitor->stop();
    c.sustain_seconds = sustain_seconds;
  }
  return c;
}

}  // namespace fp4moe
