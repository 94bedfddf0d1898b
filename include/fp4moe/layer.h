// fp4moe/layer.h - the GPU MoE layer: NVFP4 expert weights resident on one GPU, prepacked
// once into kernel order; one forward() call routes, permutes and runs FC1 (fused SwiGLU) and
// FC2 (fused deterministic finalize) with no host synchronization, so it can be captured in a
// CUDA graph (call reserve() for the largest batch first: forward() allocates nothing then).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fp4moe/hw.h"
#include "fp4moe/moe.h"
#include "fp4moe/tactic.h"
#include "fp4moe/tuning_cache.h"

struct CUstream_st;

namespace fp4moe {

using GpuStream = CUstream_st*;  // a cudaStream_t

struct LayerPlan {
  Tactic fc1;  // epilogue swiglu
  Tactic fc2;  // epilogue finalize
};

// The clock the SMs ran the GEMMs at, measured in the kernels (see set_clock_accounting).
struct SmClockAccount {
  double fc1_ghz = 0, fc2_ghz = 0;  // SM cycles (clock64) over nanoseconds (%globaltimer); 0: none
  int64_t fc1_launches = 0, fc2_launches = 0;
};

struct LayerOptions {
  int device = 0;
  // Load the tuning cache of this GPU (TuningCache::file_for) at creation: plan_for() then
  // takes the tuned tactics of the nearest token bucket, the heuristic where there is no entry.
  bool use_tuning_cache = true;
};

class GpuMoeLayer {
 public:
  // Uploads the weights (every expert materialised; the shared expert's width must equal I)
  // and prepacks them. Throws fp4moe::Error on bad weights or when no GPU is usable.
  static std::unique_ptr<GpuMoeLayer> create(const MoeWeights& weights,
                                             const LayerOptions& options = {});
  virtual ~GpuMoeLayer() = default;

  virtual const MoeConfig& config() const = 0;
  // The GPU the layer lives on (LayerOptions::device), its description, and the identity its
  // tuning-cache entries are measured under (that GPU's name, SM and SM count, the driver, this
  // build's id).
  virtual int device() const = 0;
  virtual const GpuSpec& gpu() const = 0;
  virtual const CacheIdentity& cache_identity() const = 0;
  // Workspace for batches up to max_tokens, for the plans plan_for() gives them (stream-K
  // partials included): forward() allocates nothing for such batches afterwards. A larger batch
  // later grows the workspace outside a capture; the buffers it replaces are kept until the
  // layer is destroyed, so graphs captured before still replay.
  virtual void reserve(int64_t max_tokens) = 0;
  // The same, and for `plans` as well: plans of the caller's own that forward() will be given
  // (a tuned plan, a forced tactic), each for every batch up to max_tokens it takes. Throws where
  // a plan is not one the layer runs or a tactic is not compiled in.
  virtual void reserve(int64_t max_tokens, const std::vector<LayerPlan>& plans) = 0;
  // The plan for a batch of `tokens`: the tuning cache's tactics for the nearest bucket where
  // it has them (and they are compiled in), the documented heuristic otherwise.
  virtual LayerPlan plan_for(int64_t tokens) const = 0;
  virtual LayerPlan plan_for_heuristic(int64_t tokens) const = 0;
  // "cache" or "heuristic" for each GEMM of plan_for(tokens).
  virtual std::string plan_source(int64_t tokens) const = 0;
  // Replaces the loaded tuning cache (nullptr: heuristic only). Plans are remembered per batch
  // size for the cache set: a cache changed after it was set (through another pointer) is seen
  // once it is set again.
  virtual void set_tuning_cache(std::shared_ptr<const TuningCache> cache) = 0;
  // What loading the cache reported (corrupt file, other GPU's entries, ...), one line each.
  virtual const std::vector<std::string>& tuning_warnings() const = 0;

  // out [T, H] bf16 = MoE(hidden [T, H] bf16, router logits [T, E] fp32); all pointers are
  // device memory on the layer's GPU, hidden and out 16-byte aligned; out may be hidden itself
  // (in place: every write of out follows every read of hidden). Enqueued on `stream`, a stream
  // of the layer's GPU (0 and cudaStreamPerThread: that GPU's default streams); returns without
  // waiting. A logit of -inf masks its expert (docs/ROUTING.md); a token with a NaN or
  // +inf logit, or (softmax) with every logit -inf, gets a NaN output row (its routing weights
  // are NaN; the other tokens are unaffected).
  // Calls share the layer's workspace, so they run one after another on the GPU: calls from
  // several threads are serialized on the host, and a call on another stream than the previous
  // call waits for that call's end (an event, no host wait). A captured call is ordered only when
  // its graph is launched: graph launches of one layer must not overlap each other or eager
  // calls (launch them on one stream, or order them with events). Batches that should overlap
  // need a layer each. A graph captured from a layer's calls addresses the layer's memory:
  // destroy it before the layer. An eager call may run while another thread (or another stream of
  // this one) captures, in any capture mode: it neither fails for that capture nor invalidates it.
  // The legacy default stream (0) is refused by name while a blocking stream of the GPU captures.
  virtual void forward(const uint16_t* hidden, const float* logits, int64_t tokens,
                       uint16_t* out, GpuStream stream, const LayerPlan* plan = nullptr) = 0;

  // As forward(), recording events (cudaEvent_t) on `stream`: events[0] before the routing,
  // [1] after it, [2] after FC1, [3] after FC2 - the benchmark's per-stage times. Eager calls
  // only: under capture the events become nodes of the graph, which its replays do not record
  // into the caller's events.
  virtual void forward_with_events(const uint16_t* hidden, const float* logits, int64_t tokens,
                                   uint16_t* out, GpuStream stream, void* const (&events)[4],
                                   const LayerPlan* plan = nullptr) = 0;

  // Clock accounting: while on, each launch of FC1 and FC2 adds the SM cycles and nanoseconds
  // of its CTA 0's first thread, entry to exit, to device counters. Under the power cap the SMs
  // run below the clock NVML reports (the H200: 1.42-1.67 GHz in prefill GEMMs while NVML read
  // 1980 MHz), and a benchmark that divides by NVML's clock misreads its kernels. Turning it on
  // or off waits for the device and resets the counters (not during a stream capture, nor while
  // another thread captures: it synchronizes the device and uses the legacy stream); a CUDA
  // graph captured while it is on keeps counting on replay. Reading the counters likewise.
  virtual void set_clock_accounting(bool on) = 0;
  // The mean clock of the launches counted since; waits for the device. Over launches of a few
  // microseconds it is coarse (an odd-shape test read 2.07 GHz for three ~10 us launches on an
  // H200 that boosts to 1.98: %globaltimer advances in steps); over a benchmark's replays it is
  // the clock the SMs had.
  virtual SmClockAccount read_clock_accounting() const = 0;
  // For tests and the tuner: sizes the workspace for a batch of `tokens` under `plan` as forward()
  // would, then fills the buffers that hold a call's intermediate values (routing weights, FC1's
  // activations, gathered rows, stream-K partials, per-slot rows) with NaN bytes on `stream`,
  // ordered like a call. A plan that reads any such value before writing it in the same call
  // then gives NaN output instead of the right answer left there by an earlier call. Counters
  // and indices are left alone: the kernels keep them consistent between calls. Not during a
  // capture.
  virtual void poison_workspace(int64_t tokens, const LayerPlan& plan, GpuStream stream) = 0;
  // Device views of the last forward's routing, for tests: [T, k] ids and weights.
  virtual const int32_t* topk_ids() const = 0;
  virtual const float* topk_weights() const = 0;
  // Bytes of weights read by a forward whose routing activates `active_experts` experts.
  virtual double weight_bytes(int active_experts) const = 0;
};

// A host-side convenience around forward(): uploads hidden (float values, rounded to bf16) and
// logits, runs the layer once for the output and the routing, then times `iters` CUDA-graph
// replays (median, microseconds). For tools and tests; a serving loop calls forward() itself.
// It reserves the layer's workspace for `tokens`, and with iters > 0 turns clock accounting on for
// the replays and off at the end (resetting the counters), whatever happens.
struct GpuLayerRun {
  std::vector<uint16_t> out;  // [T, H] bf16 bits
  Routing routing;            // what the GPU routed
  LayerPlan plan;
  double median_us = 0;       // 0 when iters == 0
  SmClockAccount sm_clock;    // the clock the GEMMs ran at over the replays (none when iters == 0)
};
GpuLayerRun run_gpu_layer(GpuMoeLayer& layer, const std::vector<float>& hidden,
                          const std::vector<float>& logits, int64_t tokens, int iters,
                          const LayerPlan* plan = nullptr);

}  // namespace fp4moe
