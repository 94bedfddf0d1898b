// check_layer_io (see device_pointer.h).
#include "runtime/device_pointer.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <utility>

#include "kernels/common/driver_entry_point.h"
#include "runtime/capture_mode.h"

namespace fp4moe {
namespace {

// cuMemGetAddressRange (driver_entry_point.h); null where the driver lacks it.
PFN_cuMemGetAddressRange_v3020 address_range_fn() {
  static const PFN_cuMemGetAddressRange_v3020 fn =
      driver_entry_point<PFN_cuMemGetAddressRange_v3020>("cuMemGetAddressRange", 3020);
  return fn;
}

// How many of the `want` bytes from `p` on are mapped: allocation after allocation while each
// begins where the one before ends (a range mapped in pieces). `want` where the driver cannot
// say (no entry point, an address it does not track): the check is then the kernels' own.
uint64_t mapped_bytes_from(const void* p, uint64_t want) {
  const PFN_cuMemGetAddressRange_v3020 range = address_range_fn();
  if (range == nullptr) return want;
  const auto start = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
  CUdeviceptr at = start;
  // Bounded: a tensor of a few GB mapped in 2 MB pieces takes a thousand steps; past the bound
  // the rest is taken as mapped.
  for (int step = 0; step < 4096; ++step) {
    CUdeviceptr base = 0;
    size_t size = 0;
    if (range(&base, &size, at) != CUDA_SUCCESS) return step == 0 ? want : at - start;
    const CUdeviceptr end = base + size;
    if (end - start >= want) return want;
    at = end;
  }
  return want;
}

}  // namespace

void check_layer_io(const char* call, const uint16_t* hidden, const float* logits, const uint16_t* out,
                    int64_t tokens, int64_t hidden_size, int experts, int device) {
  FP4MOE_CHECK(hidden && logits && out, call, ": null device pointer");
  const auto overlap = [](const void* a, uint64_t a_bytes, const void* b, uint64_t b_bytes) {
    const uintptr_t pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + b_bytes && pb < pa + a_bytes;
  };
  const uint64_t rows_bytes = static_cast<uint64_t>(tokens) * static_cast<uint64_t>(hidden_size) * 2;
  const uint64_t logits_bytes = static_cast<uint64_t>(tokens) * static_cast<uint64_t>(experts) * 4;
  FP4MOE_CHECK(out == hidden || !overlap(out, rows_bytes, hidden, rows_bytes), call,
               ": out overlaps hidden without being it (in place is out == hidden)");
  FP4MOE_CHECK(!overlap(out, rows_bytes, logits, logits_bytes), call, ": out overlaps logits");
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(hidden) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(logits) % 4 == 0,
               call, ": hidden and out must be 16-byte aligned and logits 4-byte aligned");
  const RelaxedCaptureMode relaxed;  // one switch for the queries (an eager call pays ~1 us)
  struct Array {
    const char* what;
    const void* p;
    uint64_t bytes;
    const char* shape;
  };
  for (const Array& x : {Array{"hidden", hidden, rows_bytes, "[T, H] bf16"}, Array{"logits", logits, logits_bytes, "[T, E] fp32"},
                         Array{"out", out, rows_bytes, "[T, H] bf16"}}) {
    cudaPointerAttributes a{};
    FP4MOE_CUDA_CHECK(cudaPointerGetAttributes(&a, x.p));
    switch (a.type) {
      case cudaMemoryTypeManaged:
        break;
      case cudaMemoryTypeDevice:
        FP4MOE_CHECK(a.device == device, call, ": ", x.what, " is memory of GPU ", a.device, ", not of the layer's GPU ",
                     device);
        break;
      case cudaMemoryTypeHost:
        FP4MOE_FAIL(call, ": ", x.what, " is host memory (cudaHostAlloc or registered), not device memory of GPU ", device);
      default:
        FP4MOE_FAIL(call, ": ", x.what,
                    " is not CUDA memory (a host allocation: malloc, new, std::vector), not device memory of GPU ", device);
    }
    const uint64_t mapped = mapped_bytes_from(x.p, x.bytes);
    FP4MOE_CHECK(mapped >= x.bytes, call, ": ", x.what, " (", x.shape, ", T = ", tokens, ": ", x.bytes,
                 " bytes) runs past the end of its allocation: ", mapped, " bytes from that pointer are device memory");
  }
}

}  // namespace fp4moe
