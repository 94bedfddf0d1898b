// route_latency: how long does one token's routing take inside the fused layer's CTAs, and how
// much of it is the instruction fetch, the loads of its inputs, and the dependent chain itself?
//
// A microbenchmark for kernel developers (sm_90a). The fused layer (sm90_w4a16_fused_layer.cuh)
// routes its batch in every CTA before any routed item can start, and at glm5 T = 1 its trace
// puts route_token's return 3.2-3.8 us after the CTA's start - about what only the shared expert's
// 14 MB can stream meanwhile. Here the fused kernel's grid (3 CTAs of 192 threads an SM) runs the
// same routing_device::route_token<8, sorted> on glm5's router (256 experts, top-8, sigmoid with
// the correction bias) three times in a row in its first consumer warp, each call stamped by
// %globaltimer and clock64:
//   call 1, token 0: the code and the inputs as the kernel's start finds them;
//   call 2, token 1: the code just run (in the SM's instruction caches), inputs not yet read;
//   call 3, token 0 again: the code and the inputs both just read (L1).
// Each launch either starts with the L2 flushed (as the bench times the layer) or follows an
// identical launch (its code and inputs in L2), and either issues beside the routing, from the
// producer lane, the two stages of bulk copies the fused kernel's first item (half a K chunk of
// the shared expert's FC1: 2 x 18 KB a CTA, 14 MB in all) puts in flight - or nothing.
// Medians over the CTAs (and over 20 launches) are printed.
//
// Usage: fp4moe_route_latency   (needs an sm_90 GPU)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/sm90_ptx.cuh"
#include "kernels/gemm/grouped_units.cuh"
#include "kernels/moe/route_token.cuh"
#include "runtime/device_buffer.h"
#include "runtime/l2_flush.h"

namespace {

namespace sm90 = fp4moe::ptx::sm90;
using fp4moe::kernels::RoutingParams;

constexpr int kThreads = 192;               // the fused kernel's CTA: producer, epilogue warp, 4 consumers
constexpr int kRoutingWarp = 2;             // its first consumer warp routes the batch's first token
constexpr int kStageBytes = 8 * 2304;       // a stage of 128 weight rows at one K group, with its scales
constexpr int kStagesInFlight = 2;          // the shared expert's first item: half a K chunk
constexpr int kCalls = 3;
constexpr int kStampWords = 3 + 2 * kCalls;  // start, copies issued, routing starts, per call: its end, its cycles

__global__ void __launch_bounds__(kThreads) route_latency_kernel(RoutingParams rp, const uint8_t* weights,
                                                                 bool copies, unsigned long long* stamps,
                                                                 int* sink) {
  __shared__ __align__(128) uint8_t stage[kStagesInFlight * kStageBytes];
  __shared__ uint64_t full;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned long long* s = stamps + static_cast<int64_t>(blockIdx.x) * kStampWords;
  if (tid == 0) {
    sm90::mbarrier_init(&full, 1);
    sm90::fence_mbarrier_init();
  }
  __syncthreads();
  if (tid == 0) s[0] = fp4moe::kernels::w4a16::global_timer_ns();
  if (warp == 0 && lane == 0 && copies) {
    // CTA b's first item: 2 stages of 18 KB, 14 MB over the fused kernel's 396 CTAs.
    sm90::mbarrier_arrive_expect_tx(&full, kStagesInFlight * kStageBytes);
    const uint8_t* src = weights + static_cast<int64_t>(blockIdx.x) * kStagesInFlight * kStageBytes;
    for (int i = 0; i < kStagesInFlight; ++i)
      sm90::bulk_copy_g2s(stage + i * kStageBytes, src + i * kStageBytes, kStageBytes, &full);
    s[1] = fp4moe::kernels::w4a16::global_timer_ns();
  }
  if (warp == kRoutingWarp) {
    int acc = 0;
    if (lane == 0) s[2] = fp4moe::kernels::w4a16::global_timer_ns();
    for (int c = 0; c < kCalls; ++c) {
      const long long c0 = clock64();
      int id;
      float w;
      fp4moe::kernels::routing_device::route_token<8, /*kSorted=*/true>(rp, c == 1 ? 1 : 0, lane, id, w);
      // The chain ends where its results are used: every lane's pair reduced into one value.
      acc += __reduce_add_sync(0xffffffffu, id + __float_as_int(w));
      const long long c1 = clock64();
      if (lane == 0) {
        s[3 + 2 * c] = fp4moe::kernels::w4a16::global_timer_ns();
        s[4 + 2 * c] = static_cast<unsigned long long>(c1 - c0);
      }
    }
    if (lane == 0 && acc == 0x7fffffff) *sink = acc;  // never true: keeps the calls
  }
  if (warp == 0 && lane == 0 && copies) sm90::mbarrier_wait(&full, 0);  // nothing in flight at exit
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main() {
  try {
    int dev = 0, sms = 0, major = 0, l2 = 0;
    FP4MOE_CUDA_CHECK(cudaGetDevice(&dev));
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    FP4MOE_CHECK(major == 9, "route_latency: built for sm_90a; this GPU is sm_", major, "x");

    // glm5's router: 256 experts, top-8, sigmoid scores plus the correction bias, one group.
    constexpr int kExperts = 256, kTokens = 2;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> logits(kTokens * kExperts), bias(kExperts);
    for (float& x : logits) x = normal(rng);
    for (float& x : bias) x = 0.1f * normal(rng);
    const int grid = 3 * sms;
    fp4moe::DeviceBuffer d_logits(logits.size() * 4), d_bias(bias.size() * 4),
        weights(static_cast<int64_t>(grid) * kStagesInFlight * kStageBytes), stamps(grid * kStampWords * 8),
        ids(kTokens * 8 * 4), wts(kTokens * 8 * 4), sink(4);
    FP4MOE_CUDA_CHECK(cudaMemcpy(d_logits.get(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
    FP4MOE_CUDA_CHECK(cudaMemcpy(d_bias.get(), bias.data(), bias.size() * 4, cudaMemcpyHostToDevice));
    FP4MOE_CUDA_CHECK(cudaMemset(weights.get(), 0x5A, weights.bytes()));
    RoutingParams rp = fp4moe::kernels::routing_params_for(
        fp4moe::RoutingConfig{fp4moe::RoutingMode::kSigmoidNoAuxTc, 8, 1, 1, true, 2.5f}, kExperts, kTokens);
    rp.logits = d_logits.get<float>();
    rp.correction_bias = d_bias.get<float>();
    rp.topk_ids = ids.get<int>(), rp.topk_weights = wts.get<float>();

    fp4moe::OwnedStream stream;
    fp4moe::L2Flusher flusher(l2);
    std::printf("route_token<8, sorted>, 256 experts top-8 sigmoid; %d CTAs x %d threads; medians over CTAs and "
                "20 launches\n\n",
                grid, kThreads);
    std::printf("| L2 at launch | copies beside | call 1 ends, from the CTA's start (us) | call 1 | call 2 (code warm) "
                "| call 3 (code and inputs warm) | cycles 1 / 2 / 3 |\n|---|---|---|---|---|---|---|\n");
    std::vector<unsigned long long> h(static_cast<size_t>(grid) * kStampWords);
    for (const bool cold : {true, false}) {
      for (const bool copies : {false, true}) {
        std::vector<double> end1, d1, d2, d3, c1, c2, c3;
        auto launch = [&] {
          route_latency_kernel<<<grid, kThreads, 0, stream>>>(rp, weights.get<uint8_t>(), copies,
                                                               stamps.get<unsigned long long>(), sink.get<int>());
          FP4MOE_CUDA_CHECK_LAUNCH();
        };
        for (int rep = 0; rep < 20; ++rep) {
          if (cold)
            flusher.flush(stream);
          else
            launch();  // an identical launch first: its code and inputs stay in L2
          launch();
          FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
          FP4MOE_CUDA_CHECK(cudaMemcpy(h.data(), stamps.get(), h.size() * 8, cudaMemcpyDeviceToHost));
          std::vector<double> e1, a, b, c, ca, cb, cc;
          for (int i = 0; i < grid; ++i) {
            const unsigned long long* s = h.data() + static_cast<size_t>(i) * kStampWords;
            e1.push_back((s[3] - s[0]) * 1e-3);
            a.push_back((s[3] - s[2]) * 1e-3);
            b.push_back((s[5] - s[3]) * 1e-3);
            c.push_back((s[7] - s[5]) * 1e-3);
            ca.push_back(static_cast<double>(s[4]));
            cb.push_back(static_cast<double>(s[6]));
            cc.push_back(static_cast<double>(s[8]));
          }
          end1.push_back(median(e1)), d1.push_back(median(a)), d2.push_back(median(b)), d3.push_back(median(c));
          c1.push_back(median(ca)), c2.push_back(median(cb)), c3.push_back(median(cc));
        }
        std::printf("| %s | %s | %.2f | %.2f | %.2f | %.2f | %.0f / %.0f / %.0f |\n", cold ? "flushed" : "warm",
                    copies ? "2 stages a CTA (14 MB)" : "none", median(end1), median(d1), median(d2), median(d3),
                    median(c1), median(c2), median(c3));
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4moe_route_latency: %s\n", e.what());
    return 1;
  }
}
