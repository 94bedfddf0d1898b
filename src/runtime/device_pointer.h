// check_layer_io: refuses, by name, a layer call's argument that is null, misaligned or not
// device memory of the GPU the work runs on.
//
// The layer's kernels read and write through the caller's pointers, and the layer's contract is
// device memory of its GPU. Host memory (a std::vector, pageable or pinned) or another GPU's
// memory passes every check of size and alignment; a kernel touching it raises
// cudaErrorIllegalAddress where the GPU cannot reach it, which is sticky: the process's CUDA
// context is lost for every layer in it (and where the GPU can reach it - mapped pinned memory,
// a peer GPU, HMM - it runs at the speed of that link, not of the GPU's memory). The runtime knows
// what each address is, so the call is refused before anything is enqueued.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"

namespace fp4moe {

// A layer call's three arrays, checked before anything is enqueued; `call` begins each message
// ("forward: null device pointer", "EP forward: hidden is host memory ..."):
// - none null;
// - hidden and out 16-byte aligned, logits 4-byte aligned (the kernels move hidden and output
//   rows 16 bytes at a time: cp.async, uint4 stores; the routing reads fp32 logits);
// - each device memory of `device` or managed memory (which any GPU of a Linux host may touch);
//   host memory, registered or not, and other GPUs' memory are refused, naming the argument;
// - each mapped to its end: an array that runs past the last mapped byte (a batch larger than
//   the buffer, a view near an allocation's end) is refused before a kernel writes past it. The
//   driver knows allocations, not arrays: where another allocation follows directly, the two
//   cannot be told from one mapped in pieces (a virtual address range mapped chunk by chunk, as
//   PyTorch's expandable segments are), so an array running into it passes;
// - out ([T, H] bf16, written while the inputs are read) either hidden itself (in place) or
//   apart from hidden and from logits ([T, E] fp32): a part of either would be overwritten
//   before it is read, and the output silently wrong.
void check_layer_io(const char* call, const uint16_t* hidden, const float* logits, const uint16_t* out,
                    int64_t tokens, int64_t hidden_size, int experts, int device);

}  // namespace fp4moe
