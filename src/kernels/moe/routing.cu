// GPU routing and permutation (see routing.cuh): one warp routes one token (route_token.cuh),
// then the (token, slot) pairs are counted, scanned and scattered into expert order.
#include <algorithm>

#include "kernels/common/cuda_check.h"
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

// Let the dependent kernel (FC1, launched with programmatic stream serialization) get its CTAs
// resident while the routing runs; it waits for our results with griddepcontrol.wait.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

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
  launch_dependents();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
  const int groups = p.experts + (p.shared_expert ? 1 : 0);
  for (int i = tid; i < groups; i += blockDim.x) counts[i] = 0;
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
    }
  }
  if (p.shared_expert && tid == 0) counts[p.experts] = p.tokens;
  __syncthreads();  // RAW: counts and the routing kept in shared memory by other warps
  block_exclusive_scan(counts, groups, offsets, warp_sums);
  for (int i = tid; i <= groups; i += blockDim.x) p.expert_offsets[i] = offsets[i];
  for (int i = tid; i < groups; i += blockDim.x) counts[i] = 0;  // reuse as fill cursors
  __syncthreads();
  const int k = p.top_k, slots = k + (p.shared_expert ? 1 : 0);
  for (int pair = tid; pair < p.tokens * k; pair += blockDim.x) {
    const int tok = pair / k, slot = pair % k;
    const int e = local_ids[pair];
    const int row = offsets[e] + atomicAdd(&counts[e], 1);
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

// ---- multi CTA (prefill): route + count, then scan + scatter ---------------------------------
template <int kPerLane>
__global__ void __launch_bounds__(256) route_and_count(const RoutingParams p) {
  const int lane = threadIdx.x & 31;
  const int tok = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (tok >= p.tokens) return;
  int id;
  float w;
  route_token<kPerLane>(p, tok, lane, id, w);
  store_routing(p, tok, lane, id, w);
  if (lane < p.top_k) atomicAdd(&p.counts[id], 1);
}

__global__ void __launch_bounds__(256) scan_and_scatter(const RoutingParams p) {
  __shared__ int offsets[kMaxRoutedExperts + 2];
  __shared__ int warp_sums[8];
  __shared__ int counts[kMaxRoutedExperts + 1];
  launch_dependents();
  const int groups = p.experts + (p.shared_expert ? 1 : 0);
  for (int i = threadIdx.x; i < groups; i += blockDim.x)
    counts[i] = (p.shared_expert && i == p.experts) ? p.tokens : p.counts[i];
  __syncthreads();
  block_exclusive_scan(counts, groups, offsets, warp_sums);
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i <= groups; i += blockDim.x) p.expert_offsets[i] = offsets[i];
  const int k = p.top_k, slots = k + (p.shared_expert ? 1 : 0);
  const int stride = gridDim.x * blockDim.x;
  for (int pair = blockIdx.x * blockDim.x + threadIdx.x; pair < p.tokens * k; pair += stride) {
    const int tok = pair / k, slot = pair % k;
    const int e = p.topk_ids[pair];
    const int row = offsets[e] + atomicAdd(&p.cursors[e], 1);
    p.row_token[row] = tok;
    p.row_weight[row] = p.topk_weights[pair];
    p.pair_row[static_cast<int64_t>(tok) * slots + slot] = row;
  }
  if (p.shared_expert) {
    for (int tok = blockIdx.x * blockDim.x + threadIdx.x; tok < p.tokens; tok += stride) {
      const int row = offsets[p.experts] + tok;
      p.row_token[row] = tok;
      p.row_weight[row] = 1.0f;
      p.pair_row[static_cast<int64_t>(tok) * slots + k] = row;
    }
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
}

void launch_routing(const RoutingParams& p, cudaStream_t stream) {
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
  const int groups = p.experts + (p.shared_expert ? 1 : 0);
  FP4MOE_CUDA_CHECK(cudaMemsetAsync(p.counts, 0, sizeof(int) * groups, stream));
  FP4MOE_CUDA_CHECK(cudaMemsetAsync(p.cursors, 0, sizeof(int) * groups, stream));
  if (p.experts <= 256) route_and_count<8><<<(p.tokens + 7) / 8, 256, 0, stream>>>(p);
  else route_and_count<kMaxRoutedExperts / 32><<<(p.tokens + 7) / 8, 256, 0, stream>>>(p);
  FP4MOE_CUDA_CHECK_LAUNCH();
  const int pairs = p.tokens * p.top_k;
  scan_and_scatter<<<std::min(1024, (pairs + 255) / 256), 256, 0, stream>>>(p);
  FP4MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace fp4moe::kernels
