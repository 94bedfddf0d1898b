// Live GPU query through the CUDA runtime. Built without CUDA, it reports "no GPU".
#include "fp4moe/hw.h"

#include <string>

#ifdef FP4MOE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fp4moe {

CudaEnvironment query_cuda_environment() {
  CudaEnvironment env;
#ifndef FP4MOE_WITH_CUDA
  env.error = "built without CUDA";
  env.no_gpu = true;
  return env;
#else
  env.built_with_cuda = true;
  cudaRuntimeGetVersion(&env.runtime_version);
  if (cudaDriverGetVersion(&env.driver_version) != cudaSuccess || env.driver_version == 0) {
    env.error = "no CUDA driver";
    env.no_gpu = true;
    return env;
  }
  int count = 0;
  const cudaError_t st = cudaGetDeviceCount(&count);
  if (st != cudaSuccess) {
    env.error = cudaGetErrorString(st);
    env.no_gpu = st == cudaErrorNoDevice;
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return env;
  }
  if (count == 0) {
    env.error = "no CUDA device";
    env.no_gpu = true;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (const cudaError_t e = cudaGetDeviceProperties(&p, i); e != cudaSuccess) {
      // Said, not dropped: a GPU the runtime cannot query is not an absent one. The list stops
      // here: a position in `devices` is the CUDA ordinal the layer and --device use, so a GPU
      // after this one cannot be listed without taking another's number.
      env.error = "GPU " + std::to_string(i) + ": " + cudaGetErrorString(e);
      cudaGetLastError();
      break;
    }
    GpuSpec g;
    g.name = p.name;
    g.key = "current:" + std::to_string(i);
    g.sm = p.major * 10 + p.minor;
    g.sm_count = p.multiProcessorCount;
    g.smem_per_block_optin = static_cast<int64_t>(p.sharedMemPerBlockOptin);
    g.smem_per_sm = static_cast<int64_t>(p.sharedMemPerMultiprocessor);
    g.smem_reserved_per_block = static_cast<int64_t>(p.reservedSharedMemPerBlock);
    g.l2_bytes = p.l2CacheSize;
    g.regs_per_sm = p.regsPerMultiprocessor;
    g.max_threads_per_sm = p.maxThreadsPerMultiProcessor;
    g.max_blocks_per_sm = p.maxBlocksPerMultiProcessor;
    int mem_clock_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i);
    // DDR: two transfers per clock.
    g.mem_bandwidth_gbs = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    // Tensor peaks are not queryable: borrow them from a table entry of the same architecture
    // and multiprocessor count when there is one.
    for (const GpuSpec& k : known_gpus()) {
      if (k.sm == g.sm && k.sm_count == g.sm_count) {
        g.bf16_tflops = k.bf16_tflops;
        g.fp8_tflops = k.fp8_tflops;
        g.fp4_tflops = k.fp4_tflops;
        break;
      }
    }
    g.live = true;
    g.device_index = i;
    env.devices.push_back(g);
  }
  return env;
#endif
}

}  // namespace fp4moe
