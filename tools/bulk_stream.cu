// bulk_stream: does the fused family's way of moving weights - bulk copies into an mbarrier ring
// of stages, items of (group, row block, K chunk) handed out by a ticket counter - read a layer's
// bytes as fast as a plain read of them?
//
// A microbenchmark for kernel developers (sm_90a). The kernel is the fused layer's skeleton
// (sm90_w4a16_fused_layer.cuh) with everything but the copies (and, in some variants, the MMA
// loop) taken out: lane 0 of warp 0 draws items and issues each stage's three bulk copies (the
// row block's weights at one K group, its block scales, one 512-byte B row), four consumer warps
// wait for each stage and release it - no epilogue, no routing, no dependencies between items. The weights are laid out as
// the prepacked checkpoint ([group][K group][row tile] x 2048 B, scales x 256 B), glm5's bytes at
// T = 1 by default (18 groups of 192 row tiles x 24 K groups: 191 MB, the 9 experts' FC1 and
// FC2). Each variant changes one thing: how items are handed out (a ticket counter, or CTA b
// taking items b, b + grid, ...), the item's K groups, stages, rows a stage, CTAs per SM, an
// evict-first L2 policy on the weight copies; what the consumers do with a stage before they
// release it: nothing, the fused kernel's MMA loop on it, or a hold of so many cycles (spinning
// or asleep), with the last items' stages queued no deeper than 1 or 2 a CTA; and how an item
// ends: nothing, or as the fused kernel's FC1 items end - the consumers' partial stores, then the
// idle warp as the epilogue warp making the round trips (arrival, the last arrival's sum, the
// release), ordered as the kernel orders them or relaxed. Timing only (the bytes are never
// checked).
//
// Beside it, the bench's plain read (bench/plain_read.h) of the same bytes; both timed as the
// bench times the layer (CUDA-graph replays, the L2 flushed before each). docs/PERFORMANCE.md,
// "What the fused layer's time is made of", has a run and what it says.
//
// Usage: fp4moe_bulk_stream [groups row_tiles k_groups]   (needs an sm_90 GPU)
#include <cuda_runtime.h>

#include <algorithm>
#include <iterator>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/plain_read.h"
#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/dequant_nvfp4.cuh"
#include "kernels/common/mma_half_chunk.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/common/sm90_ptx.cuh"
#include "runtime/captured_graph.h"
#include "runtime/device_buffer.h"
#include "runtime/event_timing.h"
#include "runtime/l2_flush.h"

namespace {

namespace sm90 = fp4moe::ptx::sm90;

constexpr int kTileBytes = 2048, kScaleBytes = 256, kBRowBytes = 512;
constexpr int kThreads = 192;  // the producer warp, the epilogue warp (idle unless items end with round trips), 4 consumers
constexpr int kConsumerWarps = 4;

struct StreamParams {
  const uint8_t* weights;  // [group][kgroup][rowtile] x 2048 B
  const uint8_t* scales;   // [group][kgroup][rowtile] x 256 B
  const uint8_t* b_row;    // 4 KB, read 512 B a stage (L2-resident after the first)
  int groups, rowtiles, kgroups;
  int item_kgroups;  // stages an item
  bool tickets;      // items from the counter; else CTA b takes b, b + grid, ...
  bool evict_first;  // the weight and scale copies with an L2 evict-first policy
  bool compute;      // the consumers run the fused kernel's MMA loop on each stage before releasing it
  int hold_cycles;   // ... or hold it this many SM cycles (clock64)
  bool hold_sleeps;  // ... asleep (__nanosleep), issuing nothing, instead of spinning on the clock
  int tail_items;    // the last tail_items items: at most tail_depth stages issued and not yet released
  int tail_depth;
  int round_trips;   // kRoundTrips*: what happens at an item's end (the fused kernel's FC1 epilogue)
  int epilogue_slots;  // the depth of the consumers' ring to the epilogue warp (<= kEpilogueSlots)
  int* counters;     // [ticket, CTAs left]: reset by the last CTA to leave
  uint32_t* sink;
  float* part;       // [item][128]: a consumer's partial tile of an item (one token)
  int* arrivals;     // [group][row block]: K chunks arrived (the last to arrive resets it)
  int* done;         // [group]: row blocks complete (never read)
  uint16_t* act;     // [group][row block][64]: the last chunk's sums
};

// An item's end, as the fused kernel's FC1 items end: the consumers store the item's partial
// tile, then the epilogue warp makes the round trips - none (it only frees the ring entry), or
// the arrival on the (group, row block) counter, the last arrival's reduction of the chunks'
// partials and the release of the group's done counter, with the kernel's ordering (acq_rel
// arrival, MEMBAR.SC before the reduction, release) or with every atomic relaxed and no fence.
enum : int {
  kRoundTripsNone = 0,
  kRoundTripsStoresOnly = 1,
  kRoundTripsOrdered = 2,      // acq_rel arrival, __threadfence (MEMBAR.SC.GPU) before the reduction, release
  kRoundTripsOrderedNoSc = 3,  // the same, the reduction's lanes ordered by __syncwarp instead of the fence
  kRoundTripsRelaxed = 4,
};
constexpr int kEpilogueSlots = 16;  // at most: the epilogue ring's depth is a variant's (the fused kernel's: 4)

template <int kRowTiles>
constexpr int stage_bytes() {
  return kRowTiles * (kTileBytes + kScaleBytes) + kBRowBytes;
}
template <int kStages, int kRowTiles>
constexpr int smem_bytes() {
  return kStages * stage_bytes<kRowTiles>() + kStages * (2 * 8 + 4) + kEpilogueSlots * (2 * 8 + 4);
}

template <int kStages, int kRowTiles>
__global__ void __launch_bounds__(kThreads) bulk_stream_kernel(const StreamParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kStageBytes = stage_bytes<kRowTiles>();
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* const empty = full + kStages;
  uint64_t* const ep_full = empty + kStages;     // an item's partial stores are out (the consumers)
  uint64_t* const ep_empty = ep_full + kEpilogueSlots;  // the epilogue warp is done with it
  // Per stage: its item, bit 30 set on the item's last stage; -1 = no more stages.
  int* const stage_item = reinterpret_cast<int*>(ep_empty + kEpilogueSlots);
  int* const ep_item = stage_item + kStages;  // per epilogue slot: the item, -1 = the end
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(&full[s], 1);
      sm90::mbarrier_init(&empty[s], kConsumerWarps);
    }
    for (int s = 0; s < kEpilogueSlots; ++s) {
      sm90::mbarrier_init(&ep_full[s], kConsumerWarps);
      sm90::mbarrier_init(&ep_empty[s], 1);
    }
    sm90::fence_mbarrier_init();
  }
  __syncthreads();
  const int rbs = p.rowtiles / kRowTiles, kcs = p.kgroups / p.item_kgroups, items = p.groups * rbs * kcs;
  if (warp == 0 && lane == 0) {
    const uint64_t policy = sm90::policy_evict_first();
    int slot = 0, n = 0, issued = 0;
    uint32_t phase = 0;
    int t = p.tickets ? atomicAdd(p.counters, 1) : static_cast<int>(blockIdx.x);
    while (t < items) {
      // Item t: K chunk innermost, then row block, then group (the fused kernel's order).
      const int g = t / (rbs * kcs), r = t - g * rbs * kcs, rb = r / kcs, kc = r - rb * kcs;
      int next = -1;
      for (int j = 0; j < p.item_kgroups; ++j) {
        // The next ticket is drawn as the item's last two stages are issued, as the fused kernel does.
        if (p.tickets && j == std::max(0, p.item_kgroups - 2)) next = atomicAdd(p.counters, 1);
        sm90::mbarrier_wait(&empty[slot], phase ^ 1);
        // Near the end, fewer stages queued per CTA: what a ring holds when the stream ends is
        // consumed after it, at the consumers' pace.
        if (t >= items - p.tail_items && issued >= p.tail_depth) {
          const int m = issued - p.tail_depth;
          sm90::mbarrier_wait(&empty[m % kStages], (m / kStages) & 1);
        }
        ++issued;
        uint8_t* const st = smem + slot * kStageBytes;
        stage_item[slot] = t | (j == p.item_kgroups - 1 ? 1 << 30 : 0);
        sm90::mbarrier_arrive_expect_tx(&full[slot], kRowTiles * (kTileBytes + kScaleBytes) + kBRowBytes);
        const int kg = kc * p.item_kgroups + j;
        const int64_t tile = (static_cast<int64_t>(g) * p.kgroups + kg) * p.rowtiles + rb * kRowTiles;
        if (p.evict_first) {
          sm90::bulk_copy_g2s_evict(st, p.weights + tile * kTileBytes, kRowTiles * kTileBytes, &full[slot], policy);
          sm90::bulk_copy_g2s_evict(st + kRowTiles * kTileBytes, p.scales + tile * kScaleBytes, kRowTiles * kScaleBytes,
                                    &full[slot], policy);
        } else {
          sm90::bulk_copy_g2s(st, p.weights + tile * kTileBytes, kRowTiles * kTileBytes, &full[slot]);
          sm90::bulk_copy_g2s(st + kRowTiles * kTileBytes, p.scales + tile * kScaleBytes, kRowTiles * kScaleBytes,
                              &full[slot]);
        }
        sm90::bulk_copy_g2s(st + kRowTiles * (kTileBytes + kScaleBytes), p.b_row + (kg % 8) * kBRowBytes, kBRowBytes,
                            &full[slot]);
        if (++slot == kStages) slot = 0, phase ^= 1;
      }
      ++n;
      t = p.tickets ? next : static_cast<int>(blockIdx.x + n * gridDim.x);
    }
    // The end: one more stage, marked last, with no bytes.
    sm90::mbarrier_wait(&empty[slot], phase ^ 1);
    stage_item[slot] = -1;
    sm90::mbarrier_arrive(&full[slot]);
  } else if (warp >= 2) {
    int slot = 0, eslot = 0;
    uint32_t phase = 0, ephase = 0, acc = 0;
    // The item's end in the consumers: the partial tile out (lanes of token 0: rows g, g + 8 of
    // each of the warp's row tiles; the values are whatever acc holds, never read for their
    // bits), then the epilogue ring entry.
    auto item_end = [&](int item) {
      if (p.round_trips != kRoundTripsNone) {
        if (item >= 0 && (lane & 3) == 0) {
          constexpr int kRpw = kRowTiles / kConsumerWarps > 0 ? kRowTiles / kConsumerWarps : 1;
          for (int r = 0; r < kRpw; ++r)
            for (int i = 0; i < 2; ++i)
              p.part[static_cast<int64_t>(item) * 128 + ((warp - 2) * kRpw + r) * 16 + (lane >> 2) + 8 * i] =
                  __uint_as_float(acc + r + i);
        }
        sm90::mbarrier_wait(&ep_empty[eslot], ephase ^ 1);
        if (warp == 2 && lane == 0) ep_item[eslot] = item;
        __syncwarp();
        if (lane == 0) sm90::mbarrier_arrive(&ep_full[eslot]);
        if (++eslot == p.epilogue_slots) eslot = 0, ephase ^= 1;
      }
    };
    for (;;) {
      sm90::mbarrier_wait(&full[slot], phase);
      const int item_of_stage = stage_item[slot];
      if (item_of_stage < 0) {
        item_end(-1);
        break;
      }
      acc ^= reinterpret_cast<const uint32_t*>(smem + slot * kStageBytes)[threadIdx.x];  // one word a thread
      if constexpr (kRowTiles % kConsumerWarps == 0) {
        if (p.compute) {
          // The fused kernel's consumer step (sm90_w4a16_fused_layer.cuh): this warp's row tiles of
          // the stage dequantized into mma.sync m16n8k16 against the stage's B row (in every column).
          constexpr int kRpw = kRowTiles / kConsumerWarps;
          const uint8_t* const st = smem + slot * kStageBytes;
          const int rt = (warp - 2) * kRpw, t = lane & 3;
          float mma_acc[kRpw][1][4] = {};
          uint2 sc8[kRpw];
#pragma unroll
          for (int r = 0; r < kRpw; ++r)
            sc8[r] = fp4moe::ptx::ld_shared_v2(st + kRowTiles * kTileBytes + (rt + r) * kScaleBytes + lane * 8);
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            uint4 aw[kRpw];
            uint32_t sc[kRpw];
#pragma unroll
            for (int r = 0; r < kRpw; ++r) {
              aw[r] = fp4moe::ptx::ld_shared_v4(st + (rt + r) * kTileBytes + c * 512 + lane * 16);
              sc[r] = fp4moe::kernels::chunk_scales(sc8[r], c);
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint4 b[1] = {fp4moe::ptx::ld_shared_v4(st + kRowTiles * (kTileBytes + kScaleBytes) + t * 32 +
                                                             c * 128 + h * 16)};
              fp4moe::kernels::mma_half_chunk(mma_acc, aw, sc, b, h);
            }
          }
#pragma unroll
          for (int r = 0; r < kRpw; ++r)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc += __float_as_uint(mma_acc[r][0][i]);
        }
      }
      if (p.hold_cycles > 0) {
        const long long t0 = clock64();
        if (p.hold_sleeps) {
          while (clock64() - t0 < p.hold_cycles) __nanosleep(100);
        } else {
          while (clock64() - t0 < p.hold_cycles) acc += acc >> 3;
        }
      }
      __syncwarp();
      if (lane == 0) sm90::mbarrier_arrive(&empty[slot]);
      if (++slot == kStages) slot = 0, phase ^= 1;
      if (item_of_stage >> 30) item_end(item_of_stage & ((1 << 30) - 1));
    }
    if (acc == 0x9E3779B9u) *p.sink = acc;  // keeps the read; never true for the filled bytes
  } else if (warp == 1 && p.round_trips != kRoundTripsNone) {
    // The epilogue warp: per item, the fused kernel's FC1 round trips (fused_fc1_reduce's loads).
    const int row_blocks = p.rowtiles / kRowTiles, chunks = p.kgroups / p.item_kgroups;
    int eslot = 0;
    uint32_t ephase = 0;
    for (;;) {
      sm90::mbarrier_wait(&ep_full[eslot], ephase);
      const int item = ep_item[eslot];
      if (item < 0) break;
      if (p.round_trips >= kRoundTripsOrdered) {
        const bool ordered = p.round_trips != kRoundTripsRelaxed;
        const int gr = item / chunks, g = gr / row_blocks;
        int is_last = 0;
        if (lane == 0) {
          const int old = ordered ? fp4moe::ptx::atomic_add_acq_rel_gpu(p.arrivals + gr, 1) : atomicAdd(p.arrivals + gr, 1);
          is_last = old == chunks - 1;
          if (is_last) p.arrivals[gr] = 0;
        }
        if (__shfl_sync(0xffffffffu, is_last, 0)) {
          if (p.round_trips == kRoundTripsOrdered) __threadfence();
          else __syncwarp();
          // As fused_fc1_reduce: per act column its gate and up rows of every chunk, 8 chunks' loads
          // in flight before any add.
          const float* part = p.part + static_cast<int64_t>(gr) * chunks * 128;
          for (int c = lane; c < 64; c += 32) {
            const int gate_row = 16 * (c / 8) + c % 8, up_row = gate_row + 8;
            float gate = 0.0f, up = 0.0f;
            for (int k0 = 0; k0 < chunks; k0 += 8) {
              float gv[8], uv[8];
#pragma unroll
              for (int k = 0; k < 8; ++k) {
                gv[k] = uv[k] = 0.0f;
                if (k0 + k < chunks)
                  gv[k] = __ldcg(part + (k0 + k) * 128 + gate_row), uv[k] = __ldcg(part + (k0 + k) * 128 + up_row);
              }
#pragma unroll
              for (int k = 0; k < 8; ++k) gate += gv[k], up += uv[k];
            }
            p.act[static_cast<int64_t>(gr) * 64 + c] = static_cast<uint16_t>(__float_as_uint(gate * up) >> 16);
          }
          __syncwarp();
          if (lane == 0) {
            if (ordered) fp4moe::ptx::red_release_gpu_add(p.done + g, 1);
            else atomicAdd(p.done + g, 1);
          }
        }
      }
      __syncwarp();
      if (lane == 0) sm90::mbarrier_arrive(&ep_empty[eslot]);
      if (++eslot == p.epilogue_slots) eslot = 0, ephase ^= 1;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && p.tickets && atomicAdd(p.counters + 1, 1) == static_cast<int>(gridDim.x) - 1) {
    p.counters[0] = 0;
    p.counters[1] = 0;
  }
}

struct Variant {
  const char* what;
  int stages, rowtiles, item_kgroups;
  bool tickets;
  int ctas_per_sm;  // 0: as many as fit
  bool evict_first;
  bool compute = false;
  int hold_cycles = 0;
  bool hold_sleeps = false;
  int tail_items = 0, tail_depth = 0;
  int round_trips = kRoundTripsNone;
  int epilogue_slots = 4;
};

template <int kStages, int kRowTiles>
double time_variant(StreamParams p, const Variant& v, int sms, int* ctas_per_sm, fp4moe::L2Flusher& flusher,
                    cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<kStages, kRowTiles>();
  const auto kernel = &bulk_stream_kernel<kStages, kRowTiles>;
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  int fit = 0;
  FP4MOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, kThreads, kSmem));
  FP4MOE_CHECK(fit >= 1, "bulk_stream: a CTA of ", kSmem, " B of shared memory does not fit");
  *ctas_per_sm = v.ctas_per_sm > 0 ? std::min(fit, v.ctas_per_sm) : fit;
  const int grid = *ctas_per_sm * sms;
  p.item_kgroups = v.item_kgroups;
  p.tickets = v.tickets;
  p.evict_first = v.evict_first;
  p.compute = v.compute;
  p.hold_cycles = v.hold_cycles;
  p.hold_sleeps = v.hold_sleeps;
  p.tail_items = v.tail_items;
  p.tail_depth = v.tail_depth;
  p.round_trips = v.round_trips;
  p.epilogue_slots = v.epilogue_slots;
  const fp4moe::CapturedGraph graph(stream, [&](cudaStream_t s) {
    kernel<<<grid, kThreads, kSmem, s>>>(p);
    FP4MOE_CUDA_CHECK_LAUNCH();
  });
  return fp4moe::median_event_time(5, 30, stream, [&] { graph.launch(stream); }, [&] { flusher.flush(stream); });
}

// The kernel's compiled (stages, row tiles) pairs, one for each the variants name.
using VariantTimer = double (*)(StreamParams, const Variant&, int, int*, fp4moe::L2Flusher&, cudaStream_t);
struct Instantiation {
  int stages, rowtiles;
  VariantTimer time;
};
constexpr Instantiation kInstantiations[] = {
    {2, 8, &time_variant<2, 8>}, {3, 8, &time_variant<3, 8>},  {6, 8, &time_variant<6, 8>},
    {3, 16, &time_variant<3, 16>}, {6, 4, &time_variant<6, 4>}, {12, 2, &time_variant<12, 2>},
    {7, 12, &time_variant<7, 12>},
};

}  // namespace

int main(int argc, char** argv) {
  try {
    int groups = 18, rowtiles = 192, kgroups = 24;
    if (argc == 4) {
      groups = std::atoi(argv[1]), rowtiles = std::atoi(argv[2]), kgroups = std::atoi(argv[3]);
    } else if (argc != 1) {
      std::fprintf(stderr, "usage: fp4moe_bulk_stream [groups row_tiles k_groups]\n");
      return 2;
    }
    // Every variant's item must tile the matrix: row blocks of 4, 8 and 16 row tiles, K chunks of 2..24.
    if (groups < 1 || rowtiles < 16 || rowtiles % 16 != 0 || kgroups < 24 || kgroups % 24 != 0) {
      std::fprintf(stderr, "fp4moe_bulk_stream: groups >= 1, row tiles a multiple of 16, K groups a multiple of 24\n");
      return 2;
    }
    int dev = 0, sms = 0, major = 0;
    FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    FP4MOE_CHECK(major == 9, "bulk_stream: built for sm_90a; this GPU is sm_", major, "x");
    int l2 = 0;
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));

    const int64_t tiles = int64_t{groups} * rowtiles * kgroups;
    const int64_t wbytes = tiles * kTileBytes, sbytes = tiles * kScaleBytes, bytes = wbytes + sbytes;
    fp4moe::DeviceBuffer data(bytes), b_row(8 * kBRowBytes), counters(8), sink(4);
    // The round trips' buffers, for items of 8 row tiles and K chunks of 4 K groups (or more).
    const int64_t rt_blocks = int64_t{groups} * (rowtiles / 8), rt_items = rt_blocks * (kgroups / 4);
    fp4moe::DeviceBuffer part(rt_items * 128 * 4), arrivals(rt_blocks * 4), done(int64_t{groups} * 4),
        act(rt_blocks * 64 * 2);
    FP4MOE_CUDA_CHECK(cudaMemset(part.get(), 0, part.bytes()));
    FP4MOE_CUDA_CHECK(cudaMemset(arrivals.get(), 0, arrivals.bytes()));
    FP4MOE_CUDA_CHECK(cudaMemset(done.get(), 0, done.bytes()));
    // Written once, for real pages (the bytes are never checked).
    FP4MOE_CUDA_CHECK(cudaMemset(data.get(), 0x5A, bytes));
    FP4MOE_CUDA_CHECK(cudaMemset(b_row.get(), 0x3C, b_row.bytes()));
    FP4MOE_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
    fp4moe::OwnedStream stream;
    fp4moe::L2Flusher flusher(l2);

    fp4moe::PlainRead reader;
    std::string why;
    FP4MOE_CHECK(reader.reserve(bytes, &why), "bulk_stream: ", why);
    const double plain = reader.time(bytes, /*graph=*/true, 5, 30, stream, [&] { flusher.flush(stream); }, 0);
    std::printf("%d groups x %d row tiles x %d K groups: %.1f MB of weights and scales\n", groups, rowtiles, kgroups,
                bytes / 1e6);
    std::printf("plain read (bench/plain_read.h): %.1f us, %.0f GB/s\n\n", plain * 1e6, bytes / plain / 1e9);
    std::printf("| variant | stages | rows | item K | CTAs/SM | KB in flight/SM | us | GB/s | x plain read |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");

    StreamParams p{};
    p.weights = data.get<uint8_t>();
    p.scales = data.get<uint8_t>() + wbytes;
    p.b_row = b_row.get<uint8_t>();
    p.groups = groups, p.rowtiles = rowtiles, p.kgroups = kgroups;
    p.counters = counters.get<int>();
    p.sink = sink.get<uint32_t>();
    p.part = part.get<float>();
    p.arrivals = arrivals.get<int>();
    p.done = done.get<int>();
    p.act = act.get<uint16_t>();
    // The fused family's glm5 shape first (m128n8k1024:s3:w6: 3 stages of 8 row tiles, items of
    // 4 K groups, 3 CTAs an SM), then one change at a time.
    const Variant variants[] = {
        {"fused shape, tickets", 3, 8, 4, true, 3, false},
        {"static items", 3, 8, 4, false, 3, false},
        {"evict-first copies", 3, 8, 4, true, 3, true},
        {"items of 2 K groups", 3, 8, 2, true, 3, false},
        {"items of 8 K groups", 3, 8, 8, true, 3, false},
        {"items of 24 K groups", 3, 8, 24, true, 3, false},
        {"1 CTA an SM", 3, 8, 4, true, 1, false},
        {"2 CTAs an SM", 3, 8, 4, true, 2, false},
        {"4 CTAs an SM", 3, 8, 4, true, 4, false},
        {"2 stages, 5 CTAs", 2, 8, 4, true, 0, false},
        {"6 stages, 2 CTAs", 6, 8, 4, true, 0, false},
        {"256 rows, 3 stages", 3, 16, 4, true, 0, false},
        {"64 rows, 6 stages", 6, 4, 4, true, 0, false},
        // The consumers holding each stage before they release it, as the fused kernel's compute
        // on it. Cycles at ~1.9 GHz: a stage of a CTA arrives every ~3000 (3 CTAs an SM, 128 rows)
        // at the read ceiling; the fused kernel's consumers at glm5 T = 1 take ~76% of that.
        {"hold 1000 cycles", 3, 8, 4, true, 3, false, false, 1000},
        {"hold 2000 cycles", 3, 8, 4, true, 3, false, false, 2000},
        {"hold 2500 cycles", 3, 8, 4, true, 3, false, false, 2500},
        {"hold 2000 cycles asleep", 3, 8, 4, true, 3, false, false, 2000, true},
        {"hold 2500 cycles asleep", 3, 8, 4, true, 3, false, false, 2500, true},
        {"hold 2280 cycles (76%)", 3, 8, 4, true, 3, false, false, 2280},
        // 76% of a stage's interval in rings of other depths and stage sizes.
        {"2 CTAs x 6 stages, hold 1520 (76%)", 6, 8, 4, true, 2, false, false, 1520},
        {"1 CTA x 7 stages of 192 rows, hold 1160 (76%)", 7, 12, 4, true, 1, false, false, 1160},
        {"1 CTA x 3 stages, hold 760 (76%)", 3, 8, 4, true, 1, false, false, 760},
        {"1 CTA x 2 stages, hold 760 (76%)", 2, 8, 4, true, 1, false, false, 760},
        {"12 stages of 32 rows, hold 500 (~70%)", 12, 2, 8, true, 3, false, false, 500},
        {"12 stages of 32 rows, hold 600 (~85%)", 12, 2, 8, true, 3, false, false, 600},
        // The last items with at most 1 or 2 stages queued a CTA: less to consume after the stream.
        {"hold 2280, last 400 items depth 1", 3, 8, 4, true, 3, false, false, 2280, false, 400, 1},
        {"hold 2280, last 800 items depth 1", 3, 8, 4, true, 3, false, false, 2280, false, 800, 1},
        {"hold 2280, last 800 items depth 2", 3, 8, 4, true, 3, false, false, 2280, false, 800, 2},
        {"hold 2280, last 1600 items depth 2", 3, 8, 4, true, 3, false, false, 2280, false, 1600, 2},
        // The consumers computing: the fused kernel's MMA loop on each stage.
        {"the MMA loop", 3, 8, 4, true, 3, false, true},
        {"the MMA loop, last 1600 items depth 2", 3, 8, 4, true, 3, false, true, 0, false, 1600, 2},
        // An item's end as the fused kernel's FC1 items end: the partial tile stored, then the
        // epilogue warp's round trips (ordered as the kernel orders them, or all relaxed).
        {"item ends: partial stores only", 3, 8, 4, true, 3, false, false, 0, false, 0, 0, kRoundTripsStoresOnly},
        {"item ends: round trips, ordered", 3, 8, 4, true, 3, false, false, 0, false, 0, 0, kRoundTripsOrdered},
        {"item ends: round trips, ordered, no SC fence", 3, 8, 4, true, 3, false, false, 0, false, 0, 0, kRoundTripsOrderedNoSc},
        {"item ends: round trips, relaxed", 3, 8, 4, true, 3, false, false, 0, false, 0, 0, kRoundTripsRelaxed},
        {"the MMA loop, partial stores only", 3, 8, 4, true, 3, false, true, 0, false, 0, 0, kRoundTripsStoresOnly},
        {"the MMA loop, round trips, ordered", 3, 8, 4, true, 3, false, true, 0, false, 0, 0, kRoundTripsOrdered},
        {"the MMA loop, round trips, ordered, no SC fence", 3, 8, 4, true, 3, false, true, 0, false, 0, 0, kRoundTripsOrderedNoSc},
        {"the MMA loop, round trips, relaxed", 3, 8, 4, true, 3, false, true, 0, false, 0, 0, kRoundTripsRelaxed},
        // The same with fewer bytes in flight an SM: one CTA an SM, or three with at most 1 or 2
        // stages each issued and not yet released (every item).
        {"1 CTA: copies alone", 3, 8, 4, true, 1, false},
        {"1 CTA: partial stores only", 3, 8, 4, true, 1, false, false, 0, false, 0, 0, kRoundTripsStoresOnly},
        {"1 CTA: round trips, ordered", 3, 8, 4, true, 1, false, false, 0, false, 0, 0, kRoundTripsOrdered},
        {"1 CTA: round trips, relaxed", 3, 8, 4, true, 1, false, false, 0, false, 0, 0, kRoundTripsRelaxed},
        {"1 CTA: the MMA loop, round trips, ordered", 3, 8, 4, true, 1, false, true, 0, false, 0, 0, kRoundTripsOrdered},
        {"depth 1: copies alone", 3, 8, 4, true, 3, false, false, 0, false, 1 << 20, 1},
        {"depth 1: round trips, ordered", 3, 8, 4, true, 3, false, false, 0, false, 1 << 20, 1, kRoundTripsOrdered},
        {"depth 1: the MMA loop, round trips, ordered", 3, 8, 4, true, 3, false, true, 0, false, 1 << 20, 1, kRoundTripsOrdered},
        {"depth 2: copies alone", 3, 8, 4, true, 3, false, false, 0, false, 1 << 20, 2},
        {"depth 2: round trips, ordered", 3, 8, 4, true, 3, false, false, 0, false, 1 << 20, 2, kRoundTripsOrdered},
        {"depth 2: the MMA loop, round trips, ordered", 3, 8, 4, true, 3, false, true, 0, false, 1 << 20, 2, kRoundTripsOrdered},
        {"depth 2: the MMA loop, round trips, relaxed", 3, 8, 4, true, 3, false, true, 0, false, 1 << 20, 2, kRoundTripsRelaxed},
        // An epilogue ring of 16: the epilogue warp may fall behind by 16 items (more than a CTA
        // takes) without holding the consumers.
        {"ring 16: round trips, ordered", 3, 8, 4, true, 3, false, false, 0, false, 0, 0, kRoundTripsOrdered, 16},
        {"ring 16: round trips, relaxed", 3, 8, 4, true, 3, false, false, 0, false, 0, 0, kRoundTripsRelaxed, 16},
        {"ring 16: the MMA loop, round trips, ordered", 3, 8, 4, true, 3, false, true, 0, false, 0, 0, kRoundTripsOrdered, 16},
    };
    for (const Variant& v : variants) {
      const auto inst = std::find_if(std::begin(kInstantiations), std::end(kInstantiations),
                                     [&](const Instantiation& i) { return i.stages == v.stages && i.rowtiles == v.rowtiles; });
      FP4MOE_CHECK(inst != std::end(kInstantiations), "bulk_stream: no instantiation for ", v.stages, " stages of ",
                   v.rowtiles, " row tiles");
      FP4MOE_CHECK(v.round_trips == kRoundTripsNone || (v.rowtiles == 8 && v.item_kgroups >= 4),
                   "bulk_stream: item ends are modelled for items of 8 row tiles and 4+ K groups");
      FP4MOE_CHECK(v.epilogue_slots >= 1 && v.epilogue_slots <= kEpilogueSlots, "bulk_stream: an epilogue ring of ",
                   v.epilogue_slots, " entries (1..", kEpilogueSlots, ")");
      int ctas = 0;
      const double t = inst->time(p, v, sms, &ctas, flusher, stream);
      const double in_flight = ctas * v.stages * (v.rowtiles * (kTileBytes + kScaleBytes) + kBRowBytes) / 1024.0;
      std::printf("| %s | %d | %d | %d | %d | %.0f | %.1f | %.0f | %.2f |\n", v.what, v.stages, v.rowtiles * 16,
                  v.item_kgroups * 256, ctas, in_flight, t * 1e6, bytes / t / 1e9, t / plain);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4moe_bulk_stream: %s\n", e.what());
    return 1;
  }
}
