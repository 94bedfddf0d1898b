// PlainRead: the benchmark's read kernel - what the read ceiling measures over a buffer many
// times the L2 (ceilings.cu), and the plain read of a layer's bytes that `fp4moe bench` times
// beside each layer.
//
// Why the second. The floor of a decode-sized layer is its bytes over the read ceiling, a rate
// measured over 4 GiB. A read of 24 or 191 MB (glm5-tp8 and glm5 at T = 1) also pays the
// launch, the ramp to full bandwidth and the tail - costs of any kernel that reads those bytes
// once, not of ours. Timed the way the layer is (CUDA-graph replays, the L2 flushed before
// each), the plain read of the layer's bytes splits a layer's distance from the floor into
// what that size costs every kernel and what our kernels cost beyond it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>

#include "runtime/device_buffer.h"

namespace fp4moe {

// Enqueues the read kernel over bytes / 16 16-byte words of `p` (grid CTAs of 512 threads);
// `sink` (4 bytes) is never written but keeps the loads alive.
void launch_read_stream(const void* p, int64_t bytes, int grid, uint32_t* sink, cudaStream_t stream);

class PlainRead {
 public:
  PlainRead();
  // Whether a read of `bytes` can be timed: the buffer grows to it (written once, so the read
  // touches real pages) unless the device lacks the memory; `why` then says so.
  bool reserve(int64_t bytes, std::string* why);
  // Median seconds of `iters` reads of `bytes` (after reserve) on `stream`, timed as the bench
  // times the layer: `before` enqueued ahead of each run (the L2 flush), CUDA-graph replays of
  // one launch where `graph`, `warmup` untimed runs (and min_warmup_s of them) first. One wave
  // of CTAs (4 of 512 threads per SM): every thread resident from the start, so a short read
  // pays one ramp and one tail.
  double time(int64_t bytes, bool graph, int warmup, int iters, cudaStream_t stream,
              const std::function<void()>& before, double min_warmup_s);

 private:
  DeviceBuffer buf_, sink_;
  int grid_ = 0;
};

}  // namespace fp4moe
