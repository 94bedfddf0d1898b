#include "runtime/l2_flush.h"

#include <algorithm>

#include "kernels/common/cuda_check.h"

namespace fp4moe {
namespace {

__global__ void fill(uint4* p, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = make_uint4(static_cast<uint32_t>(i), 1, 2, 3);
}

__global__ void read_all(const uint4* __restrict__ p, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;  // never true; keeps the loads alive
}

}  // namespace

L2Flusher::L2Flusher(int64_t l2_bytes) : bytes_(std::max<int64_t>(2 * l2_bytes, int64_t{64} << 20)) {
  int dev = 0, sms = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  grid_ = sms * 4;
  FP4MOE_CUDA_CHECK(cudaMalloc(&buffer_, bytes_));
  FP4MOE_CUDA_CHECK(cudaMalloc(&sink_, 4));
  fill<<<grid_, 256>>>(static_cast<uint4*>(buffer_), bytes_ / 16);
  FP4MOE_CUDA_CHECK_LAUNCH();
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
}

L2Flusher::~L2Flusher() {
  cudaFree(buffer_);
  cudaFree(sink_);
}

void L2Flusher::flush(cudaStream_t stream) {
  read_all<<<grid_, 512, 0, stream>>>(static_cast<const uint4*>(buffer_), bytes_ / 16, static_cast<uint32_t*>(sink_));
  FP4MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace fp4moe
