// GPU routing and permutation (see routing.cuh).
//
// One warp routes one token: lane l holds the scores of experts l, l+32, l+64, ... Top-k is k
// rounds of a warp arg-max ordered by (score descending, expert ascending) - the reference's
// tie rule. Softmax selection uses the logits themselves (softmax is strictly monotonic), so
// it picks exactly the reference's experts; sigmoid scores are float32 here and double there,
// so choices within float32 rounding of each other may rank differently (docs/ROUTING.md).
#include <algorithm>

#include "kernels/common/cuda_check.h"
#include "kernels/moe/routing.cuh"

namespace fp4moe::kernels {
namespace {

constexpr float kNegInf = -__builtin_huge_valf();

struct Best {
  float v;
  int i;
};

// (v desc, i asc) comparison: a beats b.
// Let the dependent kernel (FC1, launched with programmatic stream serialization) get its CTAs
// resident while the routing runs; it waits for our results with griddepcontrol.wait.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ bool beats(Best a, Best b) { return a.v > b.v || (a.v == b.v && a.i < b.i); }

// The warp's best (value desc, index asc) in two reductions (redux.sync, sm_80+) instead of a
// five-step shuffle tree of (value, index) pairs: the routing of a decode step is a chain of k
// of these, and each shuffle step costs a full shuffle latency. Floats are mapped to unsigned
// keys in their order (-0 as +0, so that it ties with +0 as in the comparison above).
__device__ __forceinline__ unsigned ordered_key(float v) {
  const unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}
__device__ __forceinline__ Best warp_best(Best b) {
  const unsigned key = ordered_key(b.v);
  const unsigned top = __reduce_max_sync(0xffffffffu, key);
  const unsigned index = __reduce_min_sync(0xffffffffu, key == top ? static_cast<unsigned>(b.i) : 0xffffffffu);
  return Best{key_value(top), static_cast<int>(index)};
}

// Routes token `tok` with one warp; writes ids/weights and returns through `ids`/`w` (lane j
// < k holds slot j).
// With `local_ids`/`local_w` (shared memory, [tokens][k]) the result is kept there too, so that
// the single-CTA permutation reads it without a round trip through L2.
template <int kPerLane>
__device__ void route_token(const RoutingParams& p, int tok, int lane, int& my_id, float& my_w,
                            int* local_ids = nullptr, float* local_w = nullptr) {
  const int E = p.experts, k = p.top_k;
  const float* l = p.logits + static_cast<int64_t>(tok) * E;
  // Every load first, unpredicated (lanes past E read expert E - 1 and are masked below): with
  // the loads between the sigmoids' divisions, whose slow paths are branches, the compiler
  // issued them one after another, a memory latency each - 16 in a row at T = 1 took ~10 us.
  float x[kPerLane], bias[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) x[j] = __ldg(l + min(lane + 32 * j, E - 1));
  if (p.mode == 1 && p.correction_bias) {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) bias[j] = __ldg(p.correction_bias + min(lane + 32 * j, E - 1));
  } else {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) bias[j] = 0.0f;
  }
  float choice[kPerLane], score[kPerLane];
  float maxv = kNegInf;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const bool real = lane + 32 * j < E;
    if (p.mode == 0) {
      choice[j] = real ? x[j] : kNegInf;  // selection by logit; weights below
      score[j] = choice[j];
      maxv = fmaxf(maxv, choice[j]);
    } else {
      const float s = real ? 1.0f / (1.0f + expf(-x[j])) : 0.0f;
      score[j] = s;
      choice[j] = real ? s + bias[j] : kNegInf;
    }
  }
  float denom = 1.0f;
  if (p.mode == 0) {  // softmax: p = exp(x - max) / sum
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) maxv = fmaxf(maxv, __shfl_xor_sync(0xffffffffu, maxv, d));
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + 32 * j;
      score[j] = e < E ? expf(score[j] - maxv) : 0.0f;
      sum += score[j];
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    denom = sum;
  }
  // Group-limited selection: exclude experts outside the best topk_group groups.
  if (p.mode == 1 && p.topk_group < p.n_group) {
    const int per_group = E / p.n_group;
    // Lane g (< n_group) computes group g's score: the sum of its two largest choices.
    float gscore = kNegInf;
    for (int grp = 0; grp < p.n_group; ++grp) {
      Best b1{kNegInf, 1 << 30}, b2{kNegInf, 1 << 30};
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int e = lane + 32 * j;
        if (e < E && e / per_group == grp) {
          Best c{choice[j], e};
          if (beats(c, b1)) { b2 = b1; b1 = c; } else if (beats(c, b2)) { b2 = c; }
        }
      }
      const Best top = warp_best(b1);
      // The runner-up: the best of everything but the winner.
      Best second = (b1.i == top.i) ? b2 : b1;
      second = warp_best(second);
      if (lane == grp) gscore = top.v + (per_group > 1 ? second.v : 0.0f);
    }
    // Pick topk_group groups by (score desc, index asc) - one lane per group.
    unsigned keep = 0;
    Best mine{lane < p.n_group ? gscore : kNegInf, lane};
    for (int r = 0; r < p.topk_group; ++r) {
      const Best w = warp_best(mine);
      keep |= 1u << w.i;
      if (lane == w.i) mine.v = kNegInf, mine.i = 1 << 30;
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + 32 * j;
      if (e < E && !((keep >> (e / per_group)) & 1u)) choice[j] = kNegInf;
    }
  }
  // Top-k rounds.
  float wsum = 0.0f;
  my_id = -1;
  my_w = 0.0f;
  for (int r = 0; r < k; ++r) {
    Best b{kNegInf, 1 << 30};
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + 32 * j;
      if (e < E && beats(Best{choice[j], e}, b)) b = Best{choice[j], e};
    }
    const Best w = warp_best(b);
    // The owner lane publishes the chosen expert's score and removes it.
    float s = 0.0f;
    if ((w.i & 31) == lane) {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j)
        if (lane + 32 * j == w.i) {
          s = score[j];
          choice[j] = kNegInf;
        }
    }
    s = __shfl_sync(0xffffffffu, s, w.i & 31);
    if (p.mode == 0) s /= denom;
    wsum += s;
    if (lane == r) {
      my_id = w.i;
      my_w = s;
    }
  }
  if (lane < k) {
    if (p.norm_topk_prob) my_w /= (wsum + 1e-20f);
    my_w *= p.routed_scaling_factor;
    p.topk_ids[static_cast<int64_t>(tok) * k + lane] = my_id;
    p.topk_weights[static_cast<int64_t>(tok) * k + lane] = my_w;
    if (local_ids) {
      local_ids[tok * k + lane] = my_id;
      local_w[tok * k + lane] = my_w;
    }
  }
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
template <int kPerLane>
__global__ void __launch_bounds__(1024) route_permute_single_cta(const RoutingParams p) {
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
    route_token<kPerLane>(p, tok, lane, id, w, local_ids, local_w);
    if (lane < p.top_k) atomicAdd(&counts[id], 1);
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

void launch_routing(const RoutingParams& p, cudaStream_t stream) {
  FP4MOE_CHECK(p.experts >= 1 && p.experts <= kMaxRoutedExperts, "GPU routing supports 1..",
               kMaxRoutedExperts, " experts, got ", p.experts);
  FP4MOE_CHECK(p.top_k >= 1 && p.top_k <= 32 && p.top_k <= p.experts, "GPU routing: top_k ",
               p.top_k, " out of [1, min(32, experts)]");
  FP4MOE_CHECK(p.n_group >= 1 && p.n_group <= 32 && p.experts % p.n_group == 0 &&
                   p.topk_group >= 1 && p.topk_group <= p.n_group,
               "GPU routing: n_group ", p.n_group, " / topk_group ", p.topk_group,
               " invalid (n_group <= 32 must divide the experts)");
  if (p.tokens == 0) return;
  if (p.tokens <= kSingleCtaRoutingTokens) {
    const int threads = std::min(1024, std::max(64, 32 * p.tokens));
    // Experts per lane: 8 covers E <= 256 (GLM-5, DeepSeek-V3) with a quarter of the work.
    if (p.experts <= 256) route_permute_single_cta<8><<<1, threads, 0, stream>>>(p);
    else route_permute_single_cta<kMaxRoutedExperts / 32><<<1, threads, 0, stream>>>(p);
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
