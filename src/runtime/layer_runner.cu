// run_gpu_layer: upload, run, time (see fp4moe/layer.h).
#include <cuda_runtime.h>

#include <cmath>

#include "fp4moe/bf16.h"
#include "fp4moe/error.h"
#include "fp4moe/layer.h"
#include "kernels/common/cuda_check.h"
#include "runtime/captured_graph.h"
#include "runtime/device_buffer.h"
#include "runtime/event_timing.h"
#include "runtime/gpu_wake.h"

namespace fp4moe {

GpuLayerRun run_gpu_layer(GpuMoeLayer& layer, const std::vector<float>& hidden,
                          const std::vector<float>& logits, int64_t tokens, int iters,
                          const LayerPlan* plan_in) {
  const MoeConfig& cfg = layer.config();
  FP4MOE_CHECK(static_cast<int64_t>(hidden.size()) == checked_size(tokens, cfg.hidden, "run_gpu_layer: hidden"),
               "run_gpu_layer: hidden holds ", hidden.size(), " values, expected [", tokens, ", ", cfg.hidden, "]");
  // Their size, and as route_reference does their values: the GPU routing would give a NaN or +inf
  // logit's token a NaN output row.
  check_router_logits(cfg.routing.mode, logits, tokens, cfg.num_experts, "run_gpu_layer");
  // The layer takes bf16: a finite float beyond bf16's range (~3.39e38) would round to infinity.
  std::vector<uint16_t> hb(hidden.size());
  for (size_t i = 0; i < hidden.size(); ++i) {
    const Bf16 b = Bf16::from_float(hidden[i]);
    FP4MOE_CHECK(std::isfinite(b.to_float()), "run_gpu_layer: hidden value ", i, " (token ", i / cfg.hidden, ") is ",
                 hidden[i], std::isfinite(hidden[i]) ? ", beyond bf16's range" : "");
    hb[i] = b.bits;
  }
  GpuLayerRun run;
  run.plan = plan_in ? *plan_in : layer.plan_for(tokens);
  // Inputs and poison on the call's stream: a plain cudaMemcpy's last DMA and a cudaMemset run on
  // the legacy stream, which a non-blocking stream's kernels do not wait for.
  const ScopedDevice on_device(layer.device());
  const OwnedStream s;
  DeviceBuffer dh(hb.size() * 2), dl(logits.size() * 4), dout(tokens * cfg.hidden * 2);
  FP4MOE_CUDA_CHECK(cudaMemcpyAsync(dh.get(), hb.data(), hb.size() * 2, cudaMemcpyHostToDevice, s));
  FP4MOE_CUDA_CHECK(cudaMemcpyAsync(dl.get(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice, s));
  FP4MOE_CUDA_CHECK(cudaMemsetAsync(dout.get(), 0xFF, dout.bytes(), s));  // poison: NaN where unwritten
  layer.reserve(tokens, {run.plan});
  layer.forward(dh.get<uint16_t>(), dl.get<float>(), tokens, dout.get<uint16_t>(), s, &run.plan);
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
  run.out.resize(tokens * cfg.hidden);
  FP4MOE_CUDA_CHECK(cudaMemcpy(run.out.data(), dout.get(), run.out.size() * 2, cudaMemcpyDeviceToHost));
  run.routing.tokens = tokens;
  run.routing.top_k = cfg.routing.top_k;
  run.routing.ids.resize(tokens * cfg.routing.top_k);
  run.routing.weights.resize(run.routing.ids.size());
  FP4MOE_CUDA_CHECK(cudaMemcpy(run.routing.ids.data(), layer.topk_ids(), run.routing.ids.size() * 4,
                               cudaMemcpyDeviceToHost));
  FP4MOE_CUDA_CHECK(cudaMemcpy(run.routing.weights.data(), layer.topk_weights(), run.routing.weights.size() * 4,
                               cudaMemcpyDeviceToHost));
  if (iters > 0) {
    layer.set_clock_accounting(true);  // before the capture: the replays count
    // Off again on every way out (a capture or a timing that throws included): left on, every
    // later call of the caller's would add to the counters.
    struct ClockAccountingOff {
      GpuMoeLayer& layer;
      ~ClockAccountingOff() {
        try {
          layer.set_clock_accounting(false);
        } catch (const Error&) {  // the error already thrown is the one to report
        }
      }
    } off{layer};
    const CapturedGraph graph(s, [&](cudaStream_t st) {
      layer.forward(dh.get<uint16_t>(), dl.get<float>(), tokens, dout.get<uint16_t>(), st, &run.plan);
    });
    // Warm L2 (no flush between replays): what a loop of identical calls sees. The weights were
    // made and prepacked on the host just before: the GPU is woken first (gpu_wake.h; H200, three
    // rounds: glm5 T = 1 75.0 / 75.6 / 76.6 us against 75.9 / 76.3 / 76.6 without, glm5-tp8
    // 22.5 / 22.3 / 22.4 against 22.8 / 22.6 / 22.7).
    wake_gpu();
    run.median_us = 1e6 * median_back_to_back_time(3, iters, s, [&] { graph.launch(s); });
    run.sm_clock = layer.read_clock_accounting();
  }
  return run;
}

}  // namespace fp4moe
