// GPU routing and permutation (see routing.cuh): one warp routes one token (route_token.cuh),
// then the (token, slot) pairs are counted, scanned and placed into expert order - each
// expert's pairs in token order.
#include <algorithm>

#include "kernels/common/cuda_check.h"
#include "kernels/common/launch.h"
#include "kernels/gemm/grouped_units.cuh"
#include "kernels/moe/route_token.cuh"
#include "kernels/moe/routing.cuh"

namespace fp4moe::kernels {
namespace {

using routing_device::route_token;

// Stores lane j < k's routing result as slot j of token `tok`.
__device__ __forceinline__ void store_routing(const RoutingParams& p, int tok, int lane, int id, float w) {
  if (lane < p.top_k) {
    p.topk_ids[static_cast<int64_t>(tok) * p.top_k + lane] = id;
    p.topk_weights[static_cast<int64_t>(tok) * p.top_k + lane] = w;
  }
}

// Programmatic dependent launch (w4a16::griddep_*): the dependent kernel (FC1, or place_chunk
// after route_and_count_chunk) gets its CTAs resident while this one runs and waits for its
// results with griddepcontrol.wait.
using w4a16::griddep_launch_dependents;
using w4a16::griddep_wait;

// Exclusive scan of counts[0..n) into out[0..n] by one CTA (n <= a few thousand).
__device__ void block_exclusive_scan(const int* counts, int n, int* out, int* warp_sums) {
  const int tid = threadIdx.x, threads = blockDim.x, lane = tid & 31, warp = tid >> 5;
  const int per = (n + threads - 1) / threads;
  const int b = min(tid * per, n), e = min(b + per, n);
  int local = 0;
  for (int i = b; i < e; ++i) local += counts[i];
  int incl = local;
  for (int d = 1; d < 32; d <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += v;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  int base = 0;
  for (int w = 0; w < warp; ++w) base += warp_sums[w];
  int run = base + incl - local;
  for (int i = b; i < e; ++i) {
    out[i] = run;
    run += counts[i];
  }
  if (tid == threads - 1) out[n] = run;
  __syncthreads();
}

// ---- single CTA: route, count, scan, scatter in one launch (decode) ------------------------
// Threads of the single-CTA routing: a warp per token, as many as 64 registers allow (8 experts
// a lane); 8 warps where a lane holds 32 experts' scores (~170 registers: 1024 threads spilled
// them to local memory), routing several tokens each.
template <int kPerLane>
constexpr int single_cta_threads() { return kPerLane <= 8 ? 1024 : 256; }

template <int kPerLane>
__global__ void __launch_bounds__(single_cta_threads<kPerLane>(), 1) route_permute_single_cta(const RoutingParams p) {
  __shared__ int counts[kMaxRoutedExperts + 1];
  __shared__ int offsets[kMaxRoutedExperts + 2];
  __shared__ int warp_sums[32];
  __shared__ int local_ids[kSingleCtaRoutingTokens * 32];
  __shared__ float local_w[kSingleCtaRoutingTokens * 32];
  // Per token, a bit per expert it chose: a pair's row among its expert's rows is the number of
  // earlier tokens with that expert's bit set (token order, without an atomic's arrival order).
  constexpr int kMaskWords = kMaxRoutedExperts / 32;
  __shared__ unsigned chose[kSingleCtaRoutingTokens][kMaskWords];
  griddep_launch_dependents();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
  const int groups = p.experts + (p.shared_expert ? 1 : 0);
  const int words = (p.experts + 31) >> 5;
  for (int i = tid; i < groups; i += blockDim.x) counts[i] = 0;
  for (int i = tid; i < p.tokens * words; i += blockDim.x) chose[i / words][i % words] = 0;
  __syncthreads();
  for (int tok = warp; tok < p.tokens; tok += warps) {
    int id;
    float w;
    route_token<kPerLane>(p, tok, lane, id, w);
    store_routing(p, tok, lane, id, w);
    if (lane < p.top_k) {
      // kept in shared memory too: the permutation below reads it without a round trip to L2
      local_ids[tok * p.top_k + lane] = id;
      local_w[tok * p.top_k + lane] = w;
      atomicAdd(&counts[id], 1);
      atomicOr(&chose[tok][id >> 5], 1u << (id & 31));
    }
  }
  if (p.shared_expert && tid == 0) counts[p.experts] = p.tokens;
  __syncthreads();  // RAW: counts and the routing kept in shared memory by other warps
  block_exclusive_scan(counts, groups, offsets, warp_sums);
  for (int i = tid; i <= groups; i += blockDim.x) p.expert_offsets[i] = offsets[i];
  const int k = p.top_k, slots = k + (p.shared_expert ? 1 : 0);
  for (int pair = tid; pair < p.tokens * k; pair += blockDim.x) {
    const int tok = pair / k, slot = pair % k;
    const int e = local_ids[pair];
    int rank = 0;
    for (int t = 0; t < tok; ++t) rank += (chose[t][e >> 5] >> (e & 31)) & 1;
    // (top-k chooses distinct experts, on which the masks rely; an id repeated within this
    // token would still take its own row, after the earlier slots)
    for (int j = 0; j < slot; ++j) rank += local_ids[tok * k + j] == e;
    const int row = offsets[e] + rank;
    p.row_token[row] = tok;
    p.row_weight[row] = local_w[pair];
    p.pair_row[static_cast<int64_t>(tok) * slots + slot] = row;
  }
  if (p.shared_expert) {
    for (int tok = tid; tok < p.tokens; tok += blockDim.x) {
      const int row = offsets[p.experts] + tok;
      p.row_token[row] = tok;
      p.row_weight[row] = 1.0f;
      p.pair_row[static_cast<int64_t>(tok) * slots + k] = row;
    }
  }
}

// ---- multi CTA: route and count per chunk, then place per chunk ------------------------------
// The batch in chunks of consecutive tokens (chunk_tokens each, the last shorter). An expert's
// rows are its pairs in token order: chunk c's pairs of expert e start after those of chunks
// before c, and inside the chunk the CTA places them in token order - counts and prefix sums
// only, no atomic arrival order in any row (bitwise reproducible GEMMs downstream).
constexpr int kRouteThreads = 256;
constexpr int kRouteWarps = kRouteThreads / 32;

struct RouteChunk {
  int begin, end;  // tokens
};
__device__ __forceinline__ RouteChunk route_chunk(const RoutingParams& p, int chunk_tokens) {
  const int begin = blockIdx.x * chunk_tokens;
  return {begin, min(begin + chunk_tokens, p.tokens)};
}

// Routes the chunk's tokens (a warp per token) and writes its count per group.
template <int kPerLane>
__global__ void __launch_bounds__(kRouteThreads) route_and_count_chunk(const RoutingParams p, int chunk_tokens) {
  __shared__ int counts[kMaxRoutedExperts + 1];
  griddep_launch_dependents();  // place_chunk's CTAs, resident while this runs, wait for its counts
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int groups = p.experts + (p.shared_expert ? 1 : 0);
  const RouteChunk ch = route_chunk(p, chunk_tokens);
  for (int i = tid; i < groups; i += kRouteThreads) counts[i] = 0;
  __syncthreads();
  for (int tok = ch.begin + warp; tok < ch.end; tok += kRouteWarps) {
    int id;
    float w;
    route_token<kPerLane>(p, tok, lane, id, w);
    store_routing(p, tok, lane, id, w);
    if (lane < p.top_k) atomicAdd(&counts[id], 1);  // a count: the same whatever the order
  }
  __syncthreads();
  int* mine = p.chunk_counts + static_cast<int64_t>(blockIdx.x) * groups;
  for (int i = tid; i < groups; i += kRouteThreads)
    mine[i] = (p.shared_expert && i == p.experts) ? ch.end - ch.begin : counts[i];
}

// Places the chunk's pairs: the offsets from every chunk's counts, this chunk's first row per
// group after the chunks before it, then each warp's tokens in order after the warps before it.
__global__ void __launch_bounds__(kRouteThreads) place_chunk(const RoutingParams p, int chunk_tokens) {
  __shared__ int totals[kMaxRoutedExperts + 1];   // pairs per group, then the chunk's first row
  __shared__ int offsets[kMaxRoutedExperts + 2];
  __shared__ int warp_sums[kRouteWarps];
  __shared__ int cursor[kRouteWarps][kMaxRoutedExperts + 1];  // per warp: its count, then its next row
  griddep_launch_dependents();
  griddep_wait();  // every chunk's counts and routing (route_and_count_chunk)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int groups = p.experts + (p.shared_expert ? 1 : 0);
  const int chunks = gridDim.x;
  constexpr int kPerThread = (kMaxRoutedExperts + 1 + kRouteThreads - 1) / kRouteThreads;
  constexpr int kLoadBatch = 16;
  int before[kPerThread];  // this chunk's groups: pairs in the chunks before it
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int e = tid + j * kRouteThreads;
    int b = 0, t = 0;
    if (e < groups)
      for (int c0 = 0; c0 < chunks; c0 += kLoadBatch) {
        int n[kLoadBatch];  // a batch of loads in flight: a chain of one at a time cost ~3 us at 128 chunks
#pragma unroll
        for (int i = 0; i < kLoadBatch; ++i)
          n[i] = c0 + i < chunks ? p.chunk_counts[static_cast<int64_t>(c0 + i) * groups + e] : 0;
#pragma unroll
        for (int i = 0; i < kLoadBatch; ++i) {
          b += c0 + i < static_cast<int>(blockIdx.x) ? n[i] : 0;
          t += n[i];
        }
      }
    before[j] = b;
    if (e < groups) totals[e] = t;
  }
  __syncthreads();
  block_exclusive_scan(totals, groups, offsets, warp_sums);
  if (blockIdx.x == 0)
    for (int i = tid; i <= groups; i += kRouteThreads) p.expert_offsets[i] = offsets[i];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int e = tid + j * kRouteThreads;
    if (e < groups) totals[e] = offsets[e] + before[j];
  }
  for (int i = tid; i < kRouteWarps * groups; i += kRouteThreads) cursor[i / groups][i % groups] = 0;
  __syncthreads();
  // The chunk's tokens in kRouteWarps consecutive runs, a run per warp.
  const RouteChunk ch = route_chunk(p, chunk_tokens);
  const int run = (ch.end - ch.begin + kRouteWarps - 1) / kRouteWarps;
  const int t0 = min(ch.begin + warp * run, ch.end), t1 = min(t0 + run, ch.end);
  const int k = p.top_k, slots = k + (p.shared_expert ? 1 : 0);
  for (int tok = t0; tok < t1; ++tok)
    if (lane < k) atomicAdd(&cursor[warp][p.topk_ids[static_cast<int64_t>(tok) * k + lane]], 1);
  __syncthreads();
  for (int e = tid; e < groups; e += kRouteThreads) {
    int row = totals[e];
    for (int w = 0; w < kRouteWarps; ++w) {
      const int n = cursor[w][e];
      cursor[w][e] = row;
      row += n;
    }
  }
  __syncthreads();
  // Token by token in each run, lane j placing slot j (a token's k experts are distinct; the
  // atomic only keeps rows apart if they were not).
  for (int tok = t0; tok < t1; ++tok) {
    if (lane < k) {
      const int64_t pair = static_cast<int64_t>(tok) * k + lane;
      const int row = atomicAdd(&cursor[warp][p.topk_ids[pair]], 1);
      p.row_token[row] = tok;
      p.row_weight[row] = p.topk_weights[pair];
      p.pair_row[static_cast<int64_t>(tok) * slots + lane] = row;
    }
    __syncwarp();
  }
  if (p.shared_expert)
    for (int tok = ch.begin + tid; tok < ch.end; tok += kRouteThreads) {
      const int row = offsets[p.experts] + tok;
      p.row_token[row] = tok;
      p.row_weight[row] = 1.0f;
      p.pair_row[static_cast<int64_t>(tok) * slots + k] = row;
    }
}

}  // namespace

void check_routing_shape(int experts, int top_k, int n_group, int topk_group) {
  FP4MOE_CHECK(experts >= 1 && experts <= kMaxRoutedExperts, "GPU routing supports 1..", kMaxRoutedExperts,
               " experts, got ", experts);
  FP4MOE_CHECK(top_k >= 1 && top_k <= 32 && top_k <= experts, "GPU routing: top_k ", top_k,
               " out of [1, min(32, experts)]");
  FP4MOE_CHECK(n_group >= 1 && n_group <= 32 && experts % n_group == 0 && topk_group >= 1 && topk_group <= n_group,
               "GPU routing: n_group ", n_group, " / topk_group ", topk_group,
               " invalid (n_group <= 32 must divide the experts)");
  // As MoeConfig::validate: with fewer experts in the kept groups than top_k, an excluded expert
  // (-inf) would be chosen, and a group score is the sum of its two best.
  FP4MOE_CHECK(top_k <= topk_group * (experts / n_group), "GPU routing: top_k ", top_k, " exceeds the ",
               topk_group * (experts / n_group), " experts of the ", topk_group, " kept groups");
  FP4MOE_CHECK(n_group == 1 || experts / n_group >= 2, "GPU routing: ", n_group, " groups of ", experts / n_group,
               " expert(s); group scores need at least 2 experts per group");
}

void launch_routing(const RoutingParams& p, cudaStream_t stream, bool pdl) {
  check_routing_shape(p.experts, p.top_k, p.n_group, p.topk_group);
  if (p.tokens == 0) return;
  if (p.tokens <= kSingleCtaRoutingTokens) {
    constexpr int kWide = kMaxRoutedExperts / 32;
    const int threads = std::max(64, 32 * p.tokens);
    // Experts per lane: 8 covers E <= 256 (GLM-5, DeepSeek-V3) with a quarter of the work.
    if (p.experts <= 256) route_permute_single_cta<8><<<1, std::min(threads, single_cta_threads<8>()), 0, stream>>>(p);
    else route_permute_single_cta<kWide><<<1, std::min(threads, single_cta_threads<kWide>()), 0, stream>>>(p);
    FP4MOE_CUDA_CHECK_LAUNCH();
    return;
  }
  FP4MOE_CHECK(p.chunk_counts, "GPU routing: no chunk-count scratch for ", p.tokens, " tokens");
  // Chunks of at least a CTA's warps' worth of tokens, at most kMaxRouteChunks of them.
  const int chunk_tokens = std::max(kRouteWarps, (p.tokens + kMaxRouteChunks - 1) / kMaxRouteChunks);
  const int chunks = (p.tokens + chunk_tokens - 1) / chunk_tokens;
  if (p.experts <= 256) route_and_count_chunk<8><<<chunks, kRouteThreads, 0, stream>>>(p, chunk_tokens);
  else route_and_count_chunk<kMaxRoutedExperts / 32><<<chunks, kRouteThreads, 0, stream>>>(p, chunk_tokens);
  FP4MOE_CUDA_CHECK_LAUNCH();
  launch_kernel(&place_chunk, dim3(chunks), dim3(kRouteThreads), 0, pdl, stream, p, chunk_tokens);
}

}  // namespace fp4moe::kernels
