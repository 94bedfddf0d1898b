// route_token.cuh - one warp routes one token (both modes of the reference), shared by the
// routing kernels (routing.cu) and the w4a16_gemv family, which routes its whole batch inside
// FC1 (kernels/gemm/sm80_w4a16_gemv.cuh).
//
// Lane l holds the scores of experts l, l+32, l+64, ... Top-k is k rounds of a warp arg-max
// ordered by (score descending, expert ascending) - the reference's tie rule. Softmax selection
// uses the logits themselves (softmax is strictly monotonic), so it picks exactly the
// reference's experts; sigmoid scores are float32 here and double there, so choices within
// float32 rounding of each other may rank differently (docs/ROUTING.md).
#pragma once

#include <cuda_runtime.h>

#include "kernels/moe/routing.cuh"

namespace fp4moe::kernels::routing_device {

constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kPosInf = __builtin_huge_valf();
// A chosen expert's choice score in the scan below: NaN beats nothing (every comparison with it
// is false), so an expert once chosen is never chosen again - where -inf, the old mark, tied
// with a masked expert's own -inf and the scan could choose that expert twice. The negative NaN,
// whose ordered_key (below) is 0, the lowest: were it ever to reach warp_best, it would lose there
// too (a positive NaN's key is the highest).
__device__ __forceinline__ float taken_mark() { return __int_as_float(0xffffffff); }

struct Best {
  float v;
  int i;
};

// (v desc, i asc) comparison: a beats b.
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

// Routes token `tok` with one warp: lane j < k returns slot j's expert and weight (the caller
// stores them; p's output pointers are not touched). kSorted (8 experts a lane): the top-k from
// per-lane sorted lists (below) - the w4a16_gemv family's FC1, where the routing is on the
// critical path of every CTA (a globaltimer trace of its CTA 0, glm5-tp8 T = 1: the top-k 2.4 ->
// 1.3 us). The routing kernels keep the scan: alone 8.2 -> 7.0 us with the sorted lists, yet the
// stream-K layer in a CUDA graph was ~1 us slower with them at glm5-tp8 T = 1..5 (H200, two
// rounds in one process).
template <int kPerLane, bool kSorted = false>
__device__ void route_token(const RoutingParams& p, int tok, int lane, int& my_id, float& my_w) {
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
  // A NaN or +inf logit poisons its token: the token is routed on 0 in its place, so that every
  // id stays in [0, E) (a NaN wins no comparison: a row of them left the best at an id past E,
  // and the permutation counted into it), and its routing weights become NaN below, so that the
  // output carries the NaN. The host entry points refuse such logits; a device pointer's cannot.
  // -inf is a logit like any other (a masked expert, docs/ROUTING.md): !(x < +inf) is true for
  // NaN and +inf only.
  bool bad = false;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j)
    if (!(x[j] < kPosInf)) bad = true, x[j] = 0.0f;
  bool poisoned = __any_sync(0xffffffffu, bad);
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
    // Every expert masked: softmax is 0 / 0. The scores below would be NaN already (-inf minus
    // -inf); the flag says so where it is decided. (Warp-uniform: maxv is the warp's.)
    if (maxv == kNegInf) poisoned = true;
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
  // Group-limited selection: exclude experts outside the best topk_group groups. (Laid out of
  // the straight path: GLM-5 has one group, and the routing is on FC1's critical path.)
  if (__builtin_expect(p.mode == 1 && p.topk_group < p.n_group, 0)) {
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
  // Round r chose expert `id` with score s: lane r keeps it.
  auto take = [&](int r, int id, float s) {
    if (p.mode == 0) s /= denom;
    wsum += s;
    if (lane == r) {
      my_id = id;
      my_w = s;
    }
  };
  if constexpr (kSorted) {
    static_assert(kPerLane == 8, "the sorting network sorts 8 candidates");
    // Each lane sorts its 8 candidates (choice, expert, score) once (19 compare-exchanges, all
    // lanes at once); a round is then the warp's best of the lanes' heads, whose score the
    // winning lane passes on as it pops its head - instead of every lane scanning all 8 in every
    // round, a dependent chain of 8 comparisons k times over. The same experts in the same order:
    // the best head is the best remaining candidate.
    float hv[8], hs[8];
    int hi[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int e = lane + 32 * j;
      hv[j] = e < E ? choice[j] : kNegInf;
      hi[j] = e;
      hs[j] = score[j];
    }
    constexpr int kNet[19][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 1}, {2, 3},
                                 {4, 5}, {6, 7}, {2, 4}, {3, 5}, {1, 4}, {3, 6}, {1, 2}, {3, 4}, {5, 6}};
#pragma unroll
    for (int c = 0; c < 19; ++c) {
      const int a = kNet[c][0], b = kNet[c][1];
      if (beats(Best{hv[b], hi[b]}, Best{hv[a], hi[a]})) {
        const float tv = hv[a], ts = hs[a];
        const int ti = hi[a];
        hv[a] = hv[b], hi[a] = hi[b], hs[a] = hs[b];
        hv[b] = tv, hi[b] = ti, hs[b] = ts;
      }
    }
    for (int r = 0; r < k; ++r) {
      const Best w = warp_best(Best{hv[0], hi[0]});
      const float s = __shfl_sync(0xffffffffu, hs[0], w.i & 31);
      if ((w.i & 31) == lane) {
#pragma unroll
        for (int j = 0; j < 7; ++j) hv[j] = hv[j + 1], hi[j] = hi[j + 1], hs[j] = hs[j + 1];
        hv[7] = kNegInf;
        hi[7] = 1 << 30;
      }
      take(r, w.i, s);
    }
  } else {
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
            choice[j] = taken_mark();
          }
      }
      take(r, w.i, __shfl_sync(0xffffffffu, s, w.i & 31));
    }
  }
  if (lane < k) {
    if (p.norm_topk_prob) my_w /= (wsum + 1e-20f);
    my_w *= p.routed_scaling_factor;
    if (poisoned) my_w = __int_as_float(0x7fc00000);  // NaN
  }
}

// Lane j < k (p.top_k, as the caller holds it) of the warp that routed token `tok`, holding
// route_token's id and w for slot j: the pair into the CTA's own tables - [token][slot] experts
// and weights, the bitmap of the batch's chosen experts - and, from CTA 0 only, into the
// routing's outputs. For the kernels that route their whole batch in every CTA (w4a16_gemv's
// FC1, w4a16_fused).
__device__ __forceinline__ void keep_routed_pair(const RoutingParams& p, int k, int slots, int tok, int lane, int id,
                                                 float w, int* pair_ids, float* pair_w, unsigned* bitmap) {
  if (lane >= k) return;
  pair_ids[tok * slots + lane] = id;
  pair_w[tok * slots + lane] = w;
  atomicOr(&bitmap[id >> 5], 1u << (id & 31));
  if (blockIdx.x == 0) {
    p.topk_ids[tok * k + lane] = id;
    p.topk_weights[tok * k + lane] = w;
  }
}

}  // namespace fp4moe::kernels::routing_device
