// driver_entry_point: a CUDA driver API function, found through the runtime. The library links
// the runtime statically and never the driver library itself (libcuda comes with the driver, at
// the version the machine has), so driver functions - tensor maps, address ranges, virtual memory
// - are looked up by name and ABI version at run time.
#pragma once

#include <cuda_runtime.h>

namespace fp4moe {

// The function `name` at the ABI of CUDA `version` (12000 for 12.0; the PFN_..._v<version> type of
// cudaTypedefs.h is Fn), or nullptr where the driver lacks it (the lookup's error is cleared).
template <typename Fn>
Fn driver_entry_point(const char* name, int version) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(p);
}

}  // namespace fp4moe
