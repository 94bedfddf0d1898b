// L2Flusher: evicts the L2 between timed runs by reading a buffer twice its size (reading, not
// writing: dirty lines would slow the next kernel's first accesses with their write-back).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp4moe {

class L2Flusher {
 public:
  explicit L2Flusher(int64_t l2_bytes);
  ~L2Flusher();
  L2Flusher(const L2Flusher&) = delete;
  L2Flusher& operator=(const L2Flusher&) = delete;
  void flush(cudaStream_t stream);

 private:
  void* buffer_ = nullptr;
  void* sink_ = nullptr;
  int64_t bytes_ = 0;
  int grid_ = 0;
};

}  // namespace fp4moe
