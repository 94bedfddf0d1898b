// row_gather_stream: can the copy engine gather the prefill FC1's token rows itself - one 2-D
// tensor copy of a single 128-byte row per (token, 64-K chunk), from one copy of the tokens -
// as fast as the kernel now reads them - one tensor copy of a box of N consecutive rows per chunk,
// from the gathered matrix the layer writes (every token once per slot)?
//
// A microbenchmark for kernel developers (sm_90a). The kernel is the prefill family's pipeline
// (sm90_w4a16_wgmma_grouped_gemm.cuh) with only the copies left: one producer warp fills a ring
// of stages - per 64-K chunk the N token rows (swizzled 128 B rows, the wgmma K-major layout)
// and the row block's raw weights and scales by a plain bulk copy - and one consumer warpgroup
// waits for each stage, optionally holds it for a number of cycles (the consumers' MMA work), and
// releases it. Units are (token tile, row block) in token-tile-major order, so consecutive CTAs
// read the same token rows and find them in L2, as the kernel's ticket order does.
//
//   box:        one copy per chunk of N consecutive rows of the gathered matrix G (as now)
//   rows, lane: one copy per row and chunk of X[index], all issued by lane 0
//   rows, warp: the same copies spread over the producer warp's 32 lanes
//
// The indices are random (uniform routing); G is built on the host as X[index] row by row, and
// a check kernel first compares, byte for byte, the stage a box copy of G lands with the stage
// the row copies of X land (the 128-byte swizzle is a function of the shared-memory address, so
// a one-row box written at row r's place must land swizzled as row r of the N-row box).
//
// Usage: fp4moe_row_gather_stream [tokens(16384) tiles(96)]   (needs an sm_90 GPU)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/sm90_ptx.cuh"
#include "kernels/common/tensor_map.h"
#include "runtime/device_buffer.h"
#include "runtime/event_timing.h"
#include "runtime/l2_flush.h"

namespace {

namespace sm90 = fp4moe::ptx::sm90;

constexpr int kK = 6144;          // glm5's hidden size: FC1's K
constexpr int kRowBlocks = 22;    // FC1's 4096 rows in row blocks of 192 (the m192n176 tile)
constexpr int kWeightBytes = 2 * 12 * 512 + 12 * 256;  // a 128-K stage's raw weights and scales, 192 rows
constexpr int kThreads = 160;     // the producer warp, a consumer warpgroup

enum Mode : int { kBox = 0, kRowsLane = 1, kRowsWarp = 2 };

// A stage: the chunks' token rows, then the weights; 1024-byte aligned (the swizzle's period).
template <int kTokens, int kChunks>
constexpr int stage_bytes() {
  return (kChunks * kTokens * 128 + kWeightBytes + 1023) / 1024 * 1024;
}

// The dynamic shared memory rounded up to the 128-byte swizzle's 1024-byte period (the launches
// ask for 1024 bytes of slack).
__device__ __forceinline__ uint8_t* swizzle_aligned(uint8_t* smem_raw) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
}

struct Params {
  const int* index;        // [tiles * kTokens]: the token row each permuted row reads
  const uint8_t* weights;  // streamed, kWeightBytes a stage
  int64_t weight_stages;   // stages' worth of weights in the buffer
  int tiles, hold_cycles;
  uint32_t* sink;
};

template <int kTokens, int kChunks, int kStages, int kMode>
__global__ void __launch_bounds__(kThreads, 1)
    row_gather_kernel(const __grid_constant__ CUtensorMap box_map, const __grid_constant__ CUtensorMap row_map,
                      const Params p) {
  constexpr int kStageBytes = stage_bytes<kTokens, kChunks>();
  constexpr int kTokenBytes = kChunks * kTokens * 128;
  constexpr int kStagesPerUnit = kK / (64 * kChunks);
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = swizzle_aligned(smem_raw);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* empty = full + kStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) sm90::mbarrier_init(&full[s], 1), sm90::mbarrier_init(&empty[s], 4);
    sm90::fence_mbarrier_init();
  }
  __syncthreads();
  const int units = p.tiles * kRowBlocks;
  int slot = 0;
  uint32_t phase = 0;
  if (warp == 0) {
    constexpr int kRowsPerLane = (kTokens + 31) / 32;
    int64_t wstage = blockIdx.x;
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const int tile = u / kRowBlocks;
      int rows[kRowsPerLane];
      if constexpr (kMode == kRowsWarp) {
#pragma unroll
        for (int i = 0; i < kRowsPerLane; ++i)
          rows[i] = lane + 32 * i < kTokens ? __ldg(p.index + tile * kTokens + lane + 32 * i) : 0;
      }
      for (int ks = 0; ks < kStagesPerUnit; ++ks) {
        sm90::mbarrier_wait(&empty[slot], phase ^ 1);
        uint8_t* st = smem + slot * kStageBytes;
        if (lane == 0) {
          sm90::mbarrier_arrive_expect_tx(&full[slot], kTokenBytes + kWeightBytes);
          sm90::bulk_copy_g2s(st + kTokenBytes, p.weights + (wstage % p.weight_stages) * kWeightBytes, kWeightBytes,
                              &full[slot]);
        }
        __syncwarp();
        const int k0 = ks * 64 * kChunks;
        if constexpr (kMode == kBox) {
          if (lane == 0)
#pragma unroll
            for (int c = 0; c < kChunks; ++c)
              sm90::tma_load_2d(st + c * kTokens * 128, &box_map, k0 + 64 * c, tile * kTokens, &full[slot]);
        } else if constexpr (kMode == kRowsLane) {
          // Each row's index read again every stage (an L1 hit after the unit's first stage).
          if (lane == 0)
            for (int r = 0; r < kTokens; ++r) {
              const int row = __ldg(p.index + tile * kTokens + r);
#pragma unroll
              for (int c = 0; c < kChunks; ++c)
                sm90::tma_load_2d(st + c * kTokens * 128 + r * 128, &row_map, k0 + 64 * c, row, &full[slot]);
            }
        } else {
#pragma unroll
          for (int i = 0; i < kRowsPerLane; ++i) {
            const int r = lane + 32 * i;
            if (r < kTokens)
#pragma unroll
              for (int c = 0; c < kChunks; ++c)
                sm90::tma_load_2d(st + c * kTokens * 128 + r * 128, &row_map, k0 + 64 * c, rows[i], &full[slot]);
          }
        }
        wstage += gridDim.x;
        if (++slot == kStages) slot = 0, phase ^= 1;
      }
    }
  } else {
    uint32_t acc = 0;
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      for (int ks = 0; ks < kStagesPerUnit; ++ks) {
        sm90::mbarrier_wait(&full[slot], phase);
        acc ^= reinterpret_cast<const uint32_t*>(smem + slot * kStageBytes)[threadIdx.x];
        if (p.hold_cycles > 0) {
          const long long t0 = clock64();
          while (clock64() - t0 < p.hold_cycles) acc += acc >> 3;
        }
        __syncwarp();
        if (lane == 0) sm90::mbarrier_arrive(&empty[slot]);
        if (++slot == kStages) slot = 0, phase ^= 1;
      }
    }
    if (acc == 0x9E3779B9u) *p.sink = acc;
  }
}

// One CTA: tile `tile`'s first stage by the box copy of G into buffer 0 and by the row copies of
// X into buffer 1; counts the words that differ.
template <int kTokens>
__global__ void __launch_bounds__(32, 1)
    check_kernel(const __grid_constant__ CUtensorMap box_map, const __grid_constant__ CUtensorMap row_map,
                 const int* index, int tile, uint32_t* mismatches) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = swizzle_aligned(smem_raw);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 2 * kTokens * 128);
  if (threadIdx.x == 0) {
    sm90::mbarrier_init(bar, 1);
    sm90::fence_mbarrier_init();
  }
  __syncwarp();
  if (threadIdx.x == 0) {
    sm90::mbarrier_arrive_expect_tx(bar, 2 * kTokens * 128);
    sm90::tma_load_2d(smem, &box_map, 64, tile * kTokens, bar);
    for (int r = 0; r < kTokens; ++r)
      sm90::tma_load_2d(smem + kTokens * 128 + r * 128, &row_map, 64, index[tile * kTokens + r], bar);
  }
  sm90::mbarrier_wait(bar, 0);
  uint32_t bad = 0;
  const uint32_t* w = reinterpret_cast<const uint32_t*>(smem);
  for (int i = threadIdx.x; i < kTokens * 32; i += 32) bad += w[i] != w[kTokens * 32 + i];
  atomicAdd(mismatches, bad);
}

template <int kTokens, int kChunks, int kStages, int kMode>
double time_mode(const CUtensorMap& box_map, const CUtensorMap& row_map, const Params& p, int sms,
                 fp4moe::L2Flusher& flusher, cudaStream_t stream) {
  constexpr int kSmem = kStages * stage_bytes<kTokens, kChunks>() + 2 * kStages * 8 + 1024;
  const auto kernel = &row_gather_kernel<kTokens, kChunks, kStages, kMode>;
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const auto times = fp4moe::event_times(
      2, 7, stream,
      [&] {
        kernel<<<sms, kThreads, kSmem, stream>>>(box_map, row_map, p);
        FP4MOE_CUDA_CHECK(cudaGetLastError());
      },
      [&] { flusher.flush(stream); });
  return fp4moe::median(times);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    constexpr int kTokens = 176, kChunks = 2, kStages = 3;
    const int tokens = argc > 1 ? std::atoi(argv[1]) : 16384;
    const int tiles = argc > 2 ? std::atoi(argv[2]) : 96;
    FP4MOE_CHECK(tokens >= kTokens && tiles >= 1, "row_gather_stream: tokens >= ", kTokens, ", tiles >= 1");
    int dev = 0, sms = 0;
    FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    int major = 0;
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    FP4MOE_CHECK(major == 9, "row_gather_stream: built for sm_90a; this GPU is sm_", major, "x");
    fp4moe::OwnedStream stream;

    const int64_t grows = static_cast<int64_t>(tiles) * kTokens;
    std::mt19937 rng(7);
    std::vector<int> index(grows);
    for (auto& i : index) i = static_cast<int>(rng() % tokens);
    std::vector<uint16_t> x(static_cast<size_t>(tokens) * kK);
    for (auto& v : x) v = static_cast<uint16_t>(rng());
    std::vector<uint16_t> g(static_cast<size_t>(grows) * kK);
    for (int64_t r = 0; r < grows; ++r)
      std::copy_n(x.begin() + static_cast<int64_t>(index[r]) * kK, kK, g.begin() + r * kK);

    fp4moe::DeviceBuffer dx(x.size() * 2), dg(g.size() * 2), dindex(index.size() * 4), sink(4);
    const int64_t weight_stages = (256ll << 20) / kWeightBytes;
    fp4moe::DeviceBuffer dw(weight_stages * kWeightBytes);
    FP4MOE_CUDA_CHECK(cudaMemcpy(dx.get<void>(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    FP4MOE_CUDA_CHECK(cudaMemcpy(dg.get<void>(), g.data(), g.size() * 2, cudaMemcpyHostToDevice));
    FP4MOE_CUDA_CHECK(cudaMemcpy(dindex.get<void>(), index.data(), index.size() * 4, cudaMemcpyHostToDevice));
    FP4MOE_CUDA_CHECK(cudaMemsetAsync(dw.get<void>(), 0x5A, dw.bytes(), stream));
    FP4MOE_CUDA_CHECK(cudaMemsetAsync(sink.get<void>(), 0, 4, stream));
    const CUtensorMap box_map =
        fp4moe::kernels::make_bf16_rows_tensor_map(dg.get<uint16_t>(), grows, kK, kK, kTokens);
    const CUtensorMap row_map = fp4moe::kernels::make_bf16_rows_tensor_map(dx.get<uint16_t>(), tokens, kK, kK, 1);

    // The check: the first stage of the first (up to) eight tiles, box against rows.
    {
      constexpr int kSmem = 2 * kTokens * 128 + 8 + 1024;
      FP4MOE_CUDA_CHECK(
          cudaFuncSetAttribute(check_kernel<kTokens>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
      for (int t = 0; t < std::min(tiles, 8); ++t)
        check_kernel<kTokens><<<1, 32, kSmem, stream>>>(box_map, row_map, dindex.get<int>(), t, sink.get<uint32_t>());
      FP4MOE_CUDA_CHECK(cudaGetLastError());
      uint32_t bad = 0;
      FP4MOE_CUDA_CHECK(cudaMemcpyAsync(&bad, sink.get<uint32_t>(), 4, cudaMemcpyDeviceToHost, stream));
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
      std::printf("check: %u of %d words differ between the box copy of G and the row copies of X\n", bad,
                  std::min(tiles, 8) * kTokens * 32);
      FP4MOE_CHECK(bad == 0, "row_gather_stream: the row copies did not land as the box copy");
    }

    int l2 = 0;
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    fp4moe::L2Flusher flusher(l2);
    const Params p{dindex.get<int>(), dw.get<uint8_t>(), weight_stages, tiles, 0, sink.get<uint32_t>()};
    const double stages = static_cast<double>(tiles) * kRowBlocks * (kK / (64 * kChunks));
    const double bytes = stages * (kChunks * kTokens * 128 + kWeightBytes);
    std::printf("%d tokens, %d tiles of %d rows x %d row blocks, %d-K stages, %d stages a CTA, %d CTAs\n", tokens,
                tiles, kTokens, kRowBlocks, 64 * kChunks, kStages, sms);
    std::printf("| mode | hold cycles | us | GB/s into shared memory | ns a stage a CTA | x box |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (int hold : {0, 1000, 1500, 2000}) {
      Params ph = p;
      ph.hold_cycles = hold;
      const double tb = time_mode<kTokens, kChunks, kStages, kBox>(box_map, row_map, ph, sms, flusher, stream);
      const double tl = time_mode<kTokens, kChunks, kStages, kRowsLane>(box_map, row_map, ph, sms, flusher, stream);
      const double tw = time_mode<kTokens, kChunks, kStages, kRowsWarp>(box_map, row_map, ph, sms, flusher, stream);
      for (auto [what, t] : {std::pair{"box", tb}, std::pair{"rows, lane", tl}, std::pair{"rows, warp", tw}})
        std::printf("| %s | %d | %.1f | %.0f | %.0f | %.2f |\n", what, hold, t * 1e6, bytes / t / 1e9,
                    t * 1e9 / (stages / sms), t / tb);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4moe_row_gather_stream: %s\n", e.what());
    return 1;
  }
}
