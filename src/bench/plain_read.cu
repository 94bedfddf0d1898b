// The benchmark's read kernel and the plain read of a layer's bytes (see plain_read.h).
#include "bench/plain_read.h"

#include <string>

#include "kernels/common/cuda_check.h"
#include "runtime/captured_graph.h"
#include "runtime/event_timing.h"

namespace fp4moe {
namespace {

// Each thread streams 16-byte loads, four in flight, and folds them into one word; the
// (never true) comparison keeps the loads alive without writing memory. __ldcs: each byte is
// read once (no L1, evict-first in L2).
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

}  // namespace

void launch_read_stream(const void* p, int64_t bytes, int grid, uint32_t* sink, cudaStream_t stream) {
  read_stream<<<grid, 512, 0, stream>>>(static_cast<const uint4*>(p), bytes / 16, sink);
  FP4MOE_CUDA_CHECK_LAUNCH();
}

PlainRead::PlainRead() : sink_(4) {
  int dev = 0, sms = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  grid_ = 4 * sms;
}

bool PlainRead::reserve(int64_t bytes, std::string* why) {
  const size_t want = (static_cast<size_t>(bytes) + 15) / 16 * 16;
  if (want <= buf_.bytes()) return true;
  buf_ = DeviceBuffer();  // its memory counts as free below
  size_t free_bytes = 0, total = 0;
  FP4MOE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  // Leave room for the layer's and the baseline's own allocations as they grow.
  if (want + (size_t{1} << 30) > free_bytes) {
    if (why)
      *why = "a buffer of " + std::to_string(want >> 20) + " MiB does not fit in the device's " +
             std::to_string(free_bytes >> 20) + " MiB free (less 1 GiB)";
    return false;
  }
  buf_.resize(want);
  FP4MOE_CUDA_CHECK(cudaMemset(buf_.get(), 0x5A, want));  // written once: the read touches real pages
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());  // before any stream of the caller's reads it
  return true;
}

double PlainRead::time(int64_t bytes, bool graph, int warmup, int iters, cudaStream_t stream,
                       const std::function<void()>& before, double min_warmup_s) {
  FP4MOE_CHECK(bytes > 0 && static_cast<size_t>(bytes) <= buf_.bytes(), "PlainRead::time: ", bytes,
               " bytes, reserved ", buf_.bytes());
  auto launch = [&](cudaStream_t s) { launch_read_stream(buf_.get(), bytes, grid_, sink_.get<uint32_t>(), s); };
  if (!graph) return median_event_time(warmup, iters, stream, [&] { launch(stream); }, before, min_warmup_s);
  const CapturedGraph g(stream, launch);
  return median_event_time(warmup, iters, stream, [&] { g.launch(stream); }, before, min_warmup_s);
}

}  // namespace fp4moe
