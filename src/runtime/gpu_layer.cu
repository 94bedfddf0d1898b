// GpuMoeLayer: device weights (prepacked), workspace, and the forward pass
//   routing + permutation  ->  FC1 (gather, SwiGLU)  ->  FC2 (finalize)
// as 3 to 6 launches (the multi-CTA routing is two, the prefill family gathers FC1's rows first,
// the decode family finalizes in a launch of its own), 2 for the small-batch family and 1 for the
// fused family, none of which waits for the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "fp4moe/error.h"
#include "fp4moe/heuristic.h"
#include "fp4moe/hw.h"
#include "fp4moe/layer.h"
#include "fp4moe/resource_model.h"
#include "fp4moe/tuning_cache.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/fragment_order.h"
#include "kernels/gemm/fused_params.h"
#include "kernels/gemm/gemv_shapes.h"
#include "kernels/gemm/w4a16_registry.h"
#include "kernels/moe/finalize_slots.h"
#include "kernels/moe/gather_rows.h"
#include "kernels/moe/routing.cuh"
#include "kernels/moe/weight_prep.h"
#include "runtime/device_buffer.h"
#include "runtime/capture_mode.h"
#include "runtime/device_pointer.h"

namespace fp4moe {
namespace {

using kernels::W4a16GemmParams;
using kernels::W4a16Kernel;

// Per-kernel launch facts, computed once: CTAs per SM at the dynamic smem for `experts`.
struct KernelLaunchInfo {
  int dynamic_smem = 0;
  int ctas_per_sm = 0;
};

KernelLaunchInfo launch_info(const W4a16Kernel& k, int dynamic_smem) {
  KernelLaunchInfo info;
  info.dynamic_smem = dynamic_smem;
  // Only ever raised (raise_dynamic_smem_limit): another layer (more experts) may need more.
  if (const cudaError_t e = kernels::raise_dynamic_smem_limit(k, info.dynamic_smem); e != cudaSuccess)
    FP4MOE_FAIL("tactic ", format_tactic(k.tactic), " cannot run on this GPU (", info.dynamic_smem,
                " B of shared memory: ", cudaGetErrorString(e), ")");
  FP4MOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &info.ctas_per_sm, k.function, k.tactic.warps * 32, info.dynamic_smem));
  FP4MOE_CHECK(info.ctas_per_sm > 0, "tactic ", format_tactic(k.tactic),
               " cannot run on this GPU (", info.dynamic_smem, " B of shared memory)");
  return info;
}

// A plan whose family runs both GEMMs together (runs_gemms_together) names it for both GEMMs -
// the fused family the same shape for both, its one kernel.
bool plan_pairs_gemms(const LayerPlan& plan) {
  const bool together = runs_gemms_together(plan.fc1.family);
  if (together != runs_gemms_together(plan.fc2.family)) return false;
  if (!together) return true;
  if (plan.fc1.family != plan.fc2.family) return false;
  return plan.fc1.family != Family::kW4a16Fused || with_epilogue(plan.fc1, plan.fc2.epilogue) == plan.fc2;
}

class GpuMoeLayerImpl final : public GpuMoeLayer {
 public:
  GpuMoeLayerImpl(const MoeWeights& w, const LayerOptions& opt);
  const MoeConfig& config() const override { return cfg_; }
  int device() const override { return device_; }
  const GpuSpec& gpu() const override { return gpu_; }
  const CacheIdentity& cache_identity() const override { return identity_; }
  void reserve(int64_t max_tokens) override { reserve(max_tokens, {}); }
  void reserve(int64_t max_tokens, const std::vector<LayerPlan>& plans) override;
  LayerPlan plan_for(int64_t tokens) const override;
  LayerPlan plan_for_heuristic(int64_t tokens) const override { return heuristic_plan(cfg_, tokens, gpu_); }
  std::string plan_source(int64_t tokens) const override;
  std::pair<LayerPlan, std::string> planned(int64_t tokens) const;
  std::pair<LayerPlan, std::string> plan_from(int64_t tokens, const TuningCache* cache) const;
  void set_tuning_cache(std::shared_ptr<const TuningCache> cache) override {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    cache_ = std::move(cache);
    plans_.clear();  // set again, even the same cache: planned afresh
    ++cache_generation_;
  }
  const std::vector<std::string>& tuning_warnings() const override { return cache_warnings_; }
  void forward(const uint16_t* hidden, const float* logits, int64_t tokens, uint16_t* out,
               GpuStream stream, const LayerPlan* plan) override {
    run(hidden, logits, tokens, out, stream, plan, nullptr);
  }
  void forward_with_events(const uint16_t* hidden, const float* logits, int64_t tokens,
                           uint16_t* out, GpuStream stream, void* const (&events)[4],
                           const LayerPlan* plan) override {
    run(hidden, logits, tokens, out, stream, plan, events);
  }
  void set_clock_accounting(bool on) override {
    const std::lock_guard<std::mutex> lock(call_mutex_);  // forward() reads clock_on_ and the counters
    const ScopedDevice on_device(device_);
    if (on && clock_counts_.bytes() == 0) clock_counts_.resize(6 * sizeof(unsigned long long));
    if (clock_counts_.bytes() > 0) {
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());  // no launch still adding to the counters
      FP4MOE_CUDA_CHECK(cudaMemset(clock_counts_.get(), 0, clock_counts_.bytes()));
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());  // zeroed before any stream's next launch
    }
    clock_on_ = on;
  }
  SmClockAccount read_clock_accounting() const override {
    SmClockAccount a;
    const std::lock_guard<std::mutex> lock(call_mutex_);
    if (clock_counts_.bytes() == 0) return a;
    const ScopedDevice on_device(device_);  // its synchronization waits for the layer's GPU
    unsigned long long c[6];
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    FP4MOE_CUDA_CHECK(cudaMemcpy(c, clock_counts_.get(), sizeof(c), cudaMemcpyDeviceToHost));
    // Per GEMM [cycles, ns, launches] (W4a16GemmParams::sm_clock).
    a.fc1_ghz = c[1] ? static_cast<double>(c[0]) / static_cast<double>(c[1]) : 0;
    a.fc2_ghz = c[4] ? static_cast<double>(c[3]) / static_cast<double>(c[4]) : 0;
    a.fc1_launches = static_cast<int64_t>(c[2]);
    a.fc2_launches = static_cast<int64_t>(c[5]);
    return a;
  }
  void poison_workspace(int64_t tokens, const LayerPlan& plan, GpuStream stream) override;
  const int32_t* topk_ids() const override { return topk_ids_.get<int32_t>(); }
  const float* topk_weights() const override { return topk_w_.get<float>(); }
  double weight_bytes(int active) const override {
    FP4MOE_CHECK(active >= 0 && active <= cfg_.num_experts, "weight_bytes: ", active, " active experts out of [0, ",
                 cfg_.num_experts, "]");
    const double per_group = static_cast<double>(fc1_.weight_bytes() + fc1_.scale_bytes() +
                                                 fc2_.weight_bytes() + fc2_.scale_bytes());
    return per_group * (active + (cfg_.has_shared_expert() ? 1 : 0));
  }

 private:
  void run(const uint16_t* hidden, const float* logits, int64_t tokens, uint16_t* out,
           cudaStream_t stream, const LayerPlan* plan, void* const* events);
  void enqueue(const uint16_t* hidden, const float* logits, int64_t tokens, uint16_t* out,
               cudaStream_t stream, const LayerPlan* plan, void* const* events);
  void ensure_workspace(int64_t tokens, const LayerPlan& plan, cudaStream_t stream);
  // A stream of another GPU is refused by name before anything is enqueued on it (its first
  // enqueue would fail as "invalid resource handle", after the workspace was touched). The
  // legacy and per-thread default streams (handles 0 and cudaStreamPerThread) are the layer's
  // GPU's, the current device being the layer's here.
  // (cudaStreamGetDevice needs a CUDA 12.8 driver: under an older one, through minor-version
  // compatibility, the check is skipped and a wrong stream fails at its first enqueue.)
  // Only for a stream that is not capturing: on a capturing stream the driver refuses the query
  // (cudaErrorStreamCaptureUnsupported) and invalidates the capture, so callers ask
  // cudaStreamIsCapturing, which is capture-safe, first.
  void check_stream_device(const char* call, cudaStream_t stream) const {
    int stream_device = -1;
    const cudaError_t e = cudaStreamGetDevice(stream, &stream_device);
    if (e == cudaErrorCallRequiresNewerDriver || e == cudaErrorNotSupported) {
      (void)cudaGetLastError();
      return;
    }
    FP4MOE_CUDA_CHECK(e);
    FP4MOE_CHECK(stream_device == device_, call, ": the stream belongs to GPU ", stream_device,
                 ", the layer to GPU ", device_);
  }
  void run_gemv(const uint16_t* hidden, const float* logits, int64_t tokens, uint16_t* out, cudaStream_t s,
                const W4a16Kernel& k1, const W4a16Kernel& k2, const std::function<void(int)>& record);
  void run_fused(const uint16_t* hidden, const float* logits, int64_t tokens, uint16_t* out, cudaStream_t s,
                 const W4a16Kernel& k, const std::function<void(int)>& record);
  // The fused family's work grid and its partial sums for a batch of `tokens` (fused_params.h).
  kernels::FusedGrid fused_grid_of(const Tactic& t) const {
    return kernels::fused_grid(t.tile_rows, t.tile_k / 256, static_cast<int>(fc1_.rowtiles()),
                               static_cast<int>(fc1_.kgroups()), static_cast<int>(fc2_.rowtiles()),
                               static_cast<int>(fc2_.kgroups()));
  }
  const W4a16Kernel* find_kernel(const Tactic& t, Epilogue ep, std::string* why) const;
  bool admitted(const Tactic& t, Epilogue ep, int64_t tokens) const;
  void refuse_unrunnable(const W4a16Kernel& k1, int64_t tokens) const;
  // call_done_ recorded on `stream` after work that threw part way: the next call, on whatever
  // stream, still waits for what was enqueued. A failure here is dropped: the error being thrown
  // is the one to report.
  void mark_done_after_throw(cudaStream_t stream) {
    if (cudaEventRecord(*call_done_, stream) == cudaSuccess) called_ = true;
    else (void)cudaGetLastError();
  }
  const W4a16Kernel& kernel_for(const Tactic& t, Epilogue ep) const;
  kernels::W4a16SmemShape smem_shape(int64_t tokens, int64_t k) const {
    return kernels::W4a16SmemShape{groups_, static_cast<int>(tokens), static_cast<int>(k), slots_};
  }
  int grid_for(const W4a16Kernel& k, int dynamic_smem);
  // What every family's launch of a GEMM shares: its prepacked weights and shape, the groups,
  // the first global scale per group (FC1: gate, FC2: down; FC1's up scale is its own field) and
  // its clock counters (gemm 0: FC1, 1: FC2).
  W4a16GemmParams gemm_params(int gemm, const kernels::PrepackShape& shape, const DeviceBuffer& weights,
                              const DeviceBuffer& scales, const DeviceBuffer& global_scale, int64_t k) const {
    W4a16GemmParams g;
    g.weights = weights.get<uint8_t>();
    g.scales = scales.get<uint8_t>();
    g.rowtiles = static_cast<int>(shape.rowtiles());
    g.kgroups = static_cast<int>(shape.kgroups());
    g.rows = static_cast<int>(shape.rows);
    g.k = static_cast<int>(k);
    g.num_experts = groups_;
    g.scale_a = global_scale.get<float>();
    if (clock_on_) g.sm_clock = clock_counts_.get<unsigned long long>() + 3 * gemm;  // [cycles, ns, launches]
    return g;
  }
  // The routing of `tokens` rows of `logits` into topk_ids / topk_weights (the permutation's
  // buffers are the stream-K path's to add).
  kernels::RoutingParams routing_params(const float* logits, int64_t tokens) const {
    kernels::RoutingParams rp = kernels::routing_params_for(cfg_, tokens);
    rp.logits = logits;
    rp.correction_bias = cfg_.routing.mode == RoutingMode::kSigmoidNoAuxTc && bias_.bytes() >= size_t(cfg_.num_experts) * 4
                             ? bias_.get<float>() : nullptr;
    rp.shared_expert = cfg_.has_shared_expert();
    rp.topk_ids = topk_ids_.get<int>();
    rp.topk_weights = topk_w_.get<float>();
    return rp;
  }

  MoeConfig cfg_;
  GpuSpec gpu_;
  int groups_ = 0;  // routed experts + shared
  int slots_ = 0;   // per token
  kernels::PrepackShape fc1_, fc2_;
  DeviceBuffer w13_, s13_, w2_, s2_, gate_gs_, up_gs_, down_gs_, bias_;
  // workspace
  int64_t cap_tokens_ = 0;
  DeviceBuffer topk_ids_, topk_w_, offsets_, row_token_, row_weight_, pair_row_, chunk_counts_,
      act_, partials_, unit_counters_, rows_out_, x_perm_, grid_barrier_,
      unit_tickets_, routing_ready_, fused_counters_, fused_partials_;
  // The buffers above, which ensure_workspace sizes (its list of needs has the same length).
  static constexpr size_t kWorkspaceBuffers = 17;
  std::array<const DeviceBuffer*, kWorkspaceBuffers> workspace() const {
    return {&topk_ids_, &topk_w_, &offsets_, &row_token_, &row_weight_, &pair_row_, &chunk_counts_, &act_,
            &partials_, &unit_counters_, &rows_out_, &x_perm_, &grid_barrier_, &unit_tickets_, &routing_ready_,
            &fused_counters_, &fused_partials_};
  }
  // clock accounting: [cycles, ns, launches] of FC1, then of FC2 (allocated when first turned on)
  DeviceBuffer clock_counts_;
  // Workspace buffers a larger batch replaced: kept until the layer is destroyed, because a CUDA
  // graph captured before the growth still addresses them (a serving loop captures small decode
  // batches, then runs a larger prefill batch eagerly, then replays the small graphs).
  std::vector<DeviceBuffer> retired_;
  int device_ = 0;
  bool clock_on_ = false;
  // cache_ may be replaced while another thread plans; the plans made with it so far, by token
  // count (see planned()), and how many times it was set, so that a plan made with a cache since
  // replaced is not remembered.
  mutable std::mutex cache_mutex_;
  std::shared_ptr<const TuningCache> cache_;
  mutable std::map<int64_t, std::pair<LayerPlan, std::string>> plans_;
  uint64_t cache_generation_ = 0;
  // One call at a time on the host (the workspace and the fields below), and on the GPU: the
  // workspace is the layer's, so each eager call waits for the previous eager call's end
  // (call_done_, recorded after each), whatever stream either was on.
  mutable std::mutex call_mutex_;
  std::optional<OwnedEvent> call_done_;
  bool called_ = false;
  // The workspace buffers a captured call addressed: a growth that replaces one keeps it
  // (retired_), since a graph may still use it; any other buffer a growth replaces is freed.
  std::vector<const void*> captured_;
  CacheIdentity identity_;
  std::vector<std::string> cache_warnings_;
  std::mutex info_mutex_;
  std::vector<std::pair<std::pair<const void*, int>, KernelLaunchInfo>> infos_;  // by (kernel, smem)
#if FP4MOE_FUSED_TRACE
  DeviceBuffer trace_;
  int trace_grid_ = 0;

 public:
  ~GpuMoeLayerImpl() override {
    const char* path = std::getenv("FP4MOE_FUSED_TRACE_FILE");
    if (!path || trace_grid_ == 0 || cudaDeviceSynchronize() != cudaSuccess) return;
    std::vector<unsigned long long> h(size_t(trace_grid_) * kernels::kFusedTraceWordsPerCta);
    if (cudaMemcpy(h.data(), trace_.get(), h.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess) return;
    if (FILE* f = std::fopen(path, "wb")) {
      std::fwrite(h.data(), 8, h.size(), f);
      std::fclose(f);
    }
  }
#endif
};

GpuMoeLayerImpl::GpuMoeLayerImpl(const MoeWeights& w, const LayerOptions& opt) : cfg_(w.config) {
  w.validate();
  const CudaEnvironment env = query_cuda_environment();
  FP4MOE_CHECK(!env.devices.empty(), "GPU layer: no usable GPU (", env.error, ")");
  FP4MOE_CHECK(opt.device >= 0 && opt.device < static_cast<int>(env.devices.size()),
               "GPU layer: device ", opt.device, " out of range (", env.devices.size(), " GPUs)");
  gpu_ = env.devices[opt.device];
  device_ = opt.device;
  FP4MOE_CHECK(gpu_.sm >= 80, "GPU layer: ", gpu_.name, " is sm_", gpu_.sm,
               "; the kernels need sm_80 or newer");
  const BuildSupport support = build_support_for(gpu_);
  FP4MOE_CHECK(support.runs, "GPU layer: ", support.why);
  gpu_ = gpu_for_build(gpu_, support);  // PTX of an earlier major version, JIT-compiled: plan for its features
  const ScopedDevice on_device(opt.device);  // the caller's device is restored, on a throw too
  call_done_.emplace();
  FP4MOE_CHECK(!cfg_.quantize_activations,
               "GPU layer: W4A4 activation quantization is a reference-only option (the GPU "
               "kernels compute W4A16)");
  FP4MOE_CHECK(cfg_.num_experts <= kernels::kMaxRoutedExperts, "GPU layer: ", cfg_.num_experts,
               " experts exceed the routing limit ", kernels::kMaxRoutedExperts);
  kernels::check_routing_shape(cfg_.num_experts, cfg_.routing.top_k, cfg_.routing.n_group, cfg_.routing.topk_group);
  for (int e = 0; e < cfg_.num_experts; ++e)
    FP4MOE_CHECK(w.experts[e].materialized(), "GPU layer: expert ", e, " is not materialised");
  if (cfg_.has_shared_expert())
    FP4MOE_CHECK(cfg_.shared_intermediate == cfg_.intermediate,
                 "GPU layer: the shared expert's width ", cfg_.shared_intermediate,
                 " must equal the routed experts' ", cfg_.intermediate,
                 " (it runs as one more group of the same grouped GEMM)");
  groups_ = cfg_.num_experts + (cfg_.has_shared_expert() ? 1 : 0);
  slots_ = cfg_.routing.top_k + (cfg_.has_shared_expert() ? 1 : 0);
  const int64_t H = cfg_.hidden, I = cfg_.intermediate;
  fc1_ = {2 * I, H};
  fc2_ = {H, I};
  w13_.resize(fc1_.weight_bytes() * groups_);
  s13_.resize(fc1_.scale_bytes() * groups_);
  w2_.resize(fc2_.weight_bytes() * groups_);
  s2_.resize(fc2_.scale_bytes() * groups_);
  std::vector<float> gate_gs(groups_), up_gs(groups_), down_gs(groups_);

  // Stage one expert's checkpoint-layout tensors at a time, prepack into place. All on a stream of
  // the layer's own, in order (an expert's copies wait for the previous expert's prepack, which
  // read the same staging buffers), waited for once at the end: not on the legacy stream with a
  // device-wide synchronization per expert, which would stall every other stream of the GPU (the
  // layers serving there) once per expert.
  const OwnedStream s;
  DeviceBuffer codes[3], scales[3];
  const int64_t sizes[3] = {I * H, I * H, H * I};
  for (int i = 0; i < 3; ++i) {
    codes[i].resize(sizes[i] / 2);
    scales[i].resize(sizes[i] / 16);
  }
  for (int gi = 0; gi < groups_; ++gi) {
    const ExpertWeights& ex = gi < cfg_.num_experts ? w.experts[gi] : *w.shared;
    const Nvfp4Matrix* m[3] = {&ex.gate, &ex.up, &ex.down};
    // (from pageable memory: each copy has taken the host data when it returns)
    for (int i = 0; i < 3; ++i) {
      FP4MOE_CUDA_CHECK(cudaMemcpyAsync(codes[i].get(), m[i]->data.data(), m[i]->data.size(),
                                        cudaMemcpyHostToDevice, s));
      FP4MOE_CUDA_CHECK(cudaMemcpyAsync(scales[i].get(), m[i]->block_scales.data(),
                                        m[i]->block_scales.size(), cudaMemcpyHostToDevice, s));
    }
    const kernels::Nvfp4View gate{codes[0].get<uint8_t>(), scales[0].get<uint8_t>()};
    const kernels::Nvfp4View up{codes[1].get<uint8_t>(), scales[1].get<uint8_t>()};
    const kernels::Nvfp4View down{codes[2].get<uint8_t>(), scales[2].get<uint8_t>()};
    kernels::launch_prepack(gate, up, I, H, true, w13_.get<uint8_t>() + gi * fc1_.weight_bytes(),
                            s13_.get<uint8_t>() + gi * fc1_.scale_bytes(), s);
    kernels::launch_prepack(down, down, H, I, false, w2_.get<uint8_t>() + gi * fc2_.weight_bytes(),
                            s2_.get<uint8_t>() + gi * fc2_.scale_bytes(), s);
    gate_gs[gi] = ex.gate.global_scale;
    up_gs[gi] = ex.up.global_scale;
    down_gs[gi] = ex.down.global_scale;
  }
  // An empty vector uploads as zeros (what an empty correction bias means): the routing reads
  // the bias wherever the buffer holds E floats, which its 4-byte minimum does at E = 1.
  auto upload = [&s](DeviceBuffer& b, const std::vector<float>& v) {
    b.resize(std::max<size_t>(4, v.size() * 4));
    if (v.empty())
      FP4MOE_CUDA_CHECK(cudaMemsetAsync(b.get(), 0, b.bytes(), s));
    else
      FP4MOE_CUDA_CHECK(cudaMemcpyAsync(b.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice, s));
  };
  upload(gate_gs_, gate_gs);
  upload(up_gs_, up_gs);
  upload(down_gs_, down_gs);
  upload(bias_, w.correction_bias);
  // The layer is whole on return: its first call, on any stream, reads finished weights.
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));

  identity_ = CacheIdentity{gpu_.name, gpu_.sm, gpu_.sm_count, env.driver_version, build_id()};
  if (opt.use_tuning_cache) {
    const std::string path = TuningCache::file_for(gpu_.sm);
    auto cache = std::make_shared<TuningCache>(TuningCache::load(path, &cache_warnings_));
    if (const int foreign = cache->foreign_entries(identity_))
      cache_warnings_.push_back(path + ": " + std::to_string(foreign) +
                                " entries measured on another GPU, SM count, driver or build ignored");
    cache_ = std::move(cache);
  }
}

LayerPlan GpuMoeLayerImpl::plan_for(int64_t tokens) const { return planned(tokens).first; }

std::string GpuMoeLayerImpl::plan_source(int64_t tokens) const { return planned(tokens).second; }

// The plan for `tokens` and where each GEMM's tactic came from ("cache" or "heuristic"), decided
// together so that the source always describes the plan returned. Remembered per token count
// for the cache in use: an eager forward() plans at every call, and the heuristic with the
// resource model's verdicts costs 4-13 us of host time, half a glm5-tp8 decode layer.
std::pair<LayerPlan, std::string> GpuMoeLayerImpl::planned(int64_t tokens) const {
  FP4MOE_CHECK(tokens >= 1 && tokens <= (int64_t{1} << 24), "plan_for: token count ", tokens, " out of [1, 2^24]");
  std::shared_ptr<const TuningCache> cache;
  uint64_t generation = 0;
  {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    if (const auto it = plans_.find(tokens); it != plans_.end()) return it->second;
    cache = cache_;
    generation = cache_generation_;
  }
  const std::pair<LayerPlan, std::string> made = plan_from(tokens, cache.get());  // outside the lock
  const std::lock_guard<std::mutex> lock(cache_mutex_);
  if (generation == cache_generation_) {  // not if the cache was set meanwhile
    if (plans_.size() >= 4096) plans_.clear();  // a bound for callers of many batch sizes
    plans_.emplace(tokens, made);
  }
  return made;
}

std::pair<LayerPlan, std::string> GpuMoeLayerImpl::plan_from(int64_t tokens, const TuningCache* cache) const {
  const LayerPlan plan = plan_for_heuristic(tokens);
  const std::pair<LayerPlan, std::string> heuristic{plan, "heuristic/heuristic"};
  if (!cache) return heuristic;
  LayerPlan cached = plan;
  bool from_cache[2] = {false, false};
  // An entry whose winner this layer cannot run for that GEMM (a hand-edited or foreign file: the
  // loader checks only what the file says of itself) leaves the heuristic's tactic: one that is
  // not compiled for this GPU, or one the resource model refuses at this batch (a small-batch
  // tactic for more than 256 experts, a tile whose staged batch outgrows shared memory).
  auto take = [&](const GemmKey& key, Tactic& slot, bool& taken) {
    if (auto e = cache->lookup(identity_, key, tokens);
        e && find_kernel(e->winner, key.epilogue, nullptr) && admitted(e->winner, key.epilogue, tokens)) {
      slot = e->winner;
      taken = true;
    }
  };
  take(fc1_key(cfg_), cached.fc1, from_cache[0]);
  take(fc2_key(cfg_), cached.fc2, from_cache[1]);
  // The small-batch and fused families run their two GEMMs together and only up to their batch:
  // an entry of a neighbouring bucket that breaks either rule leaves the heuristic's plan.
  if (!plan_pairs_gemms(cached) || (runs_gemms_together(cached.fc1.family) && tokens > cached.fc1.tile_tokens))
    return heuristic;
  return {cached, std::string(from_cache[0] ? "cache" : "heuristic") + "/" + (from_cache[1] ? "cache" : "heuristic")};
}

// Whether the resource model admits `t` for this layer's GEMM of epilogue `ep` at `tokens`, as the
// tuner required of every candidate (of a family that runs both GEMMs the tuner also required
// the twin's fit; here each GEMM's own tactic is checked, the FC2 that runs included).
bool GpuMoeLayerImpl::admitted(const Tactic& t, Epilogue ep, int64_t tokens) const {
  return tactic_range_error(t).empty() &&
         model_resources(t, gpu_, DataType::kNvfp4, gemm_model_options(cfg_, tokens, ep)).fits;
}

// The kernel that runs `t` for a GEMM of epilogue `ep` on this GPU, or nullptr with the reason in
// *why (built only where asked for: planning checks every forward call's cached tactics).
const W4a16Kernel* GpuMoeLayerImpl::find_kernel(const Tactic& t, Epilogue ep, std::string* why) const {
  const auto none = [why](const auto&... parts) -> const W4a16Kernel* {
    if (why) {
      std::ostringstream o;
      (o << ... << parts);
      *why = o.str();
    }
    return nullptr;
  };
  if (t.family != Family::kW4a16Mma && t.family != Family::kW4a16Wgmma && t.family != Family::kW4a16Gemv &&
      t.family != Family::kW4a16Fused)
    return none(" is not of a family this layer runs (w4a16_mma, w4a16_wgmma, w4a16_gemv, w4a16_fused)");
  if (t.family == Family::kW4a16Wgmma && !gpu_.has_wgmma())
    return none(" needs sm_90a (wgmma); ", gpu_.name, " is ", gpu_.arch_name());
  if (t.family == Family::kW4a16Fused && gpu_.sm < 90)
    return none(" needs sm_90+ (the bulk copy engine); ", gpu_.name, " is ", gpu_.arch_name());
  if (t.epilogue != ep) return none(" has epilogue ", to_string(t.epilogue), ", this GEMM needs ", to_string(ep));
  if (t.split_k != 1) return none(": the families schedule their own K split, split-K must be 1");
  const W4a16Kernel* k = kernels::find_w4a16_kernel(t);
  return k ? k : none(" is not compiled in");
}

const W4a16Kernel& GpuMoeLayerImpl::kernel_for(const Tactic& t, Epilogue ep) const {
  std::string why;
  if (const W4a16Kernel* k = find_kernel(t, ep, &why)) return *k;
  FP4MOE_FAIL("GPU layer: tactic ", format_tactic(t), why);
}

// Every resident CTA slot of the GPU at this shared memory (the stream-K families leave CTAs
// beyond their iteration count idle; w4a16_gemv takes at most its blocks).
int GpuMoeLayerImpl::grid_for(const W4a16Kernel& k, int dynamic_smem) {
  std::lock_guard<std::mutex> lock(info_mutex_);
  const std::pair<const void*, int> key{k.function, dynamic_smem};
  auto it = std::find_if(infos_.begin(), infos_.end(), [&](const auto& p) { return p.first == key; });
  if (it == infos_.end()) {
    infos_.emplace_back(key, launch_info(k, dynamic_smem));
    it = infos_.end() - 1;
  }
  return it->second.ctas_per_sm * gpu_.sm_count;
}

void GpuMoeLayerImpl::ensure_workspace(int64_t tokens, const LayerPlan& plan, cudaStream_t stream) {
  const int64_t P = tokens * slots_;
  const int64_t H = cfg_.hidden, I = cfg_.intermediate;
  // Units of a GEMM: token tiles (at most P / 8 + one partial tile per group) x row blocks
  // (at most rowtiles / 4 with the 64-row tiles).
  const int64_t tiles_bound = (P + 7) / 8 + groups_;
  const int64_t row_blocks_bound = std::max((fc1_.rowtiles() + 3) / 4, (fc2_.rowtiles() + 3) / 4);
  const W4a16Kernel& k1 = kernel_for(plan.fc1, Epilogue::kSwiglu);
  const W4a16Kernel& k2 = kernel_for(plan.fc2, Epilogue::kFinalize);
  FP4MOE_CHECK(plan_pairs_gemms(plan), "GPU layer: ", format_tactic(plan.fc1), " + ", format_tactic(plan.fc2),
               ": w4a16_gemv runs FC1 and FC2 together (FC1 routes, FC2 reads its [token][slot] rows), w4a16_fused "
               "runs both in one kernel (the same shape for both)");
  // The fused family's counters (for its largest batch: they stay) and partial sums (for this
  // batch, or for its largest where reserve() sizes a plan for more tokens than the family takes).
  const bool fused = plan.fc1.family == Family::kW4a16Fused;
  const kernels::FusedGrid fg = fused ? fused_grid_of(plan.fc1) : kernels::FusedGrid{};
  const int64_t fused_counter_ints =
      fused ? kernels::fused_counters(kernels::fused_max_active(groups_, kernels::kFusedTokens, slots_), fg).total : 0;
  const int fused_tokens = static_cast<int>(std::min<int64_t>(tokens, kernels::kFusedTokens));
  const int fused_active = kernels::fused_max_active(groups_, fused_tokens, slots_);
  const int64_t fused_part_floats =
      fused ? kernels::fused_fc1_part_floats(fused_active, fg, plan.fc1.tile_rows, fused_tokens) +
                  kernels::fused_fc2_part_floats(fused_active, fg, static_cast<int>(fc2_.rowtiles()), fused_tokens)
            : 0;
  const int64_t partial_floats =
      2 * std::max<int64_t>(k1.tile_floats ? int64_t{grid_for(k1, k1.dynamic_smem_bytes(smem_shape(tokens, H)))} * k1.tile_floats : 0,
                            k2.tile_floats ? int64_t{grid_for(k2, k2.dynamic_smem_bytes(smem_shape(tokens, I)))} * k2.tile_floats : 0);
  struct Need {
    DeviceBuffer* buf;
    size_t bytes;
    bool zero;  // counters must start at zero (the kernels reset them after use)
  };
  const Need needs[] = {
      {&topk_ids_, size_t(tokens * cfg_.routing.top_k * 4), false},
      {&topk_w_, size_t(tokens * cfg_.routing.top_k * 4), false},
      {&offsets_, size_t(groups_ + 2) * 4, false},
      {&row_token_, size_t(P * 4), false},
      {&row_weight_, size_t(P * 4), false},
      {&pair_row_, size_t(P * 4), false},
      {&chunk_counts_, size_t(kernels::routing_scratch_ints(cfg_.num_experts)) * 4, false},  // the routing's
      {&act_, size_t(P * kernels::fragment_order_pitch(I) * 2), false},
      {&partials_, size_t(partial_floats * 4), false},
      {&unit_counters_, size_t(tiles_bound * row_blocks_bound * 4), true},
      {&rows_out_, size_t(P * H * 2), false},
      {&grid_barrier_, 8, true},
      {&unit_tickets_, 8, true},  // the prefill family's unit scheduler: FC1's, FC2's
      {&routing_ready_, 8, true},  // the small-batch family: routing published, FC2 CTAs that looked
      {&fused_counters_, size_t(fused_counter_ints * 4), true},  // the fused family: tickets, arrivals (self-resetting)
      {&fused_partials_, size_t(fused_part_floats * 4), false},
      // the prefill family reads FC1's tokens gathered into permuted order (fragment order)
      {&x_perm_, plan.fc1.family == Family::kW4a16Wgmma ? size_t(P * kernels::fragment_order_pitch(H) * 2) : size_t{0},
       false},
  };
  static_assert(std::extent_v<decltype(needs)> == kWorkspaceBuffers, "workspace() lists every buffer sized here");
  bool grow = false;
  for (const Need& n : needs) grow |= n.buf->bytes() < n.bytes;
  if (!grow) return;
  FP4MOE_CHECK(capture_status("GPU layer", stream) == cudaStreamCaptureStatusNone,
               "GPU layer: the workspace must grow for ", tokens,
               " tokens during CUDA graph capture; call reserve(max_tokens) before capturing (with the plans you "
               "pass forward(), reserve(max_tokens, plans))");
  // (The allocations and frees below run in the callers' relaxed capture mode - forward's eager
  // calls, poison_workspace, reserve: another thread's capture neither refuses them nor is
  // invalidated by them, capture_mode.h.)
  // Buffers are replaced below: the last eager call (on whatever stream) must have ended.
  if (called_) FP4MOE_CUDA_CHECK(cudaStreamWaitEvent(stream, *call_done_, 0));
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (const Need& n : needs) {
    if (n.buf->bytes() >= n.bytes) continue;
    // A buffer that grows again grows by half at least: batches growing a token at a time
    // reallocate a logarithmic number of times, not once per call.
    const size_t bytes = n.buf->bytes() > 0 ? std::max(n.bytes, n.buf->bytes() + n.buf->bytes() / 2) : n.bytes;
    if (const auto it = std::find(captured_.begin(), captured_.end(), n.buf->get()); it != captured_.end()) {
      captured_.erase(it);
      retired_.push_back(std::move(*n.buf));
    }
    try {
      n.buf->resize(bytes);
    } catch (const Error&) {
      if (bytes == n.bytes) throw;
      n.buf->resize(n.bytes);  // the extra half did not fit: the size asked for
    }
    // On the call's stream and waited for: a plain cudaMemset runs on the legacy default stream,
    // which a non-blocking stream's kernels do not wait for.
    if (n.zero) FP4MOE_CUDA_CHECK(cudaMemsetAsync(n.buf->get(), 0, n.buf->bytes(), stream));
  }
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void GpuMoeLayerImpl::reserve(int64_t max_tokens, const std::vector<LayerPlan>& explicit_plans) {
  FP4MOE_CHECK(max_tokens >= 1 && max_tokens <= (int64_t{1} << 24), "reserve: max_tokens ", max_tokens,
               " out of [1, 2^24]");
  const std::lock_guard<std::mutex> lock(call_mutex_);
  const ScopedDevice on_device(device_);
  const RelaxedCaptureMode relaxed;  // its stream, kernel set-up and allocations (capture_mode.h)
  // Every buffer at its largest over plan_for()'s plans (cache or heuristic) up to max_tokens:
  // each plan's buffers for max_tokens, since a plan chosen at T <= max_tokens may serve any
  // batch up to the next bucket (a prefill plan's gather buffer, say, at 700 tokens from 512's).
  // The plans are those of every T up to 64 and then of T in steps of 1/64: a tactic's band of
  // tokens per expert can be narrower than a factor of two (the 16-token decode tile from 6 to
  // 10, i.e. T = 257..426 for 256 experts top-6, holds no power of two), and a plan missed here
  // made a later capture fail for want of workspace. Each kernel's launch facts (shared-memory
  // limit, occupancy) are set up here too, so that no first use falls inside a capture.
  std::vector<LayerPlan> plans;
  auto set_up = [&](const LayerPlan& plan, int64_t t) {
    for (const auto& [tactic, ep, k] : {std::tuple{plan.fc1, Epilogue::kSwiglu, cfg_.hidden},
                                        std::tuple{plan.fc2, Epilogue::kFinalize, cfg_.intermediate}}) {
      const W4a16Kernel& kernel = kernel_for(tactic, ep);
      grid_for(kernel, kernel.dynamic_smem_bytes(smem_shape(t, k)));
    }
    if (std::none_of(plans.begin(), plans.end(), [&](const LayerPlan& q) { return q.fc1 == plan.fc1 && q.fc2 == plan.fc2; }))
      plans.push_back(plan);
  };
  auto each_t = [](int64_t most, auto&& fn) {
    for (int64_t t = 1; t < most; t += std::max<int64_t>(1, t / 64)) fn(t);
    fn(most);
  };
  each_t(max_tokens, [&](int64_t t) { set_up(planned(t).first, t); });
  // The caller's own plans (forward(..., &plan)), at every batch each takes up to max_tokens (the
  // small-batch family's shared memory depends on the batch): refused here, by name, where no
  // forward() could run them.
  for (const LayerPlan& plan : explicit_plans) {
    FP4MOE_CHECK(plan_pairs_gemms(plan), "reserve: ", format_tactic(plan.fc1), " + ", format_tactic(plan.fc2),
                 " is not a plan the layer runs (w4a16_gemv and w4a16_fused run both GEMMs, the fused family one "
                 "shape for both)");
    const W4a16Kernel& k1 = kernel_for(plan.fc1, Epilogue::kSwiglu);
    const int64_t most = runs_gemms_together(plan.fc1.family) ? std::min<int64_t>(max_tokens, plan.fc1.tile_tokens)
                                                              : max_tokens;
    refuse_unrunnable(k1, most);  // (the expert limit of the families that route in-kernel)
    each_t(most, [&](int64_t t) { set_up(plan, t); });
  }
  const OwnedStream s;  // not the legacy stream, which another thread's capture may forbid
  for (const LayerPlan& plan : plans) ensure_workspace(max_tokens, plan, s);
}

// What refuses a batch for a family whose kernel runs both GEMMs (the plan's FC1 kernel k1), before
// anything is enqueued and before the workspace grows for it.
void GpuMoeLayerImpl::refuse_unrunnable(const W4a16Kernel& k1, int64_t tokens) const {
  if (!runs_gemms_together(k1.tactic.family)) return;
  FP4MOE_CHECK(tokens <= k1.tactic.tile_tokens, "GPU layer: tactic ", format_tactic(k1.tactic), " takes batches of 1..",
               k1.tactic.tile_tokens, " tokens, got ", tokens);
  // Their kernels route in-kernel, a warp's lanes over the experts (the launch checks it too, but
  // after the workspace grew).
  const int most = k1.tactic.family == Family::kW4a16Gemv ? kernels::kGemvMaxRoutedExperts
                                                           : kernels::kFusedMaxRoutedExperts;
  FP4MOE_CHECK(cfg_.num_experts <= most, "GPU layer: tactic ", format_tactic(k1.tactic), " routes up to ", most,
               " experts in its kernel; this layer has ", cfg_.num_experts);
}

void GpuMoeLayerImpl::poison_workspace(int64_t tokens, const LayerPlan& plan, GpuStream stream) {
  FP4MOE_CHECK(tokens >= 1 && tokens <= (int64_t{1} << 24), "poison_workspace: token count ", tokens,
               " out of [1, 2^24]");
  const std::lock_guard<std::mutex> lock(call_mutex_);
  const ScopedDevice on_device(device_);
  // ensure_workspace refuses a growth under capture, and the fills below would be captured too.
  FP4MOE_CHECK(capture_status("poison_workspace", stream) == cudaStreamCaptureStatusNone,
               "poison_workspace: not during a CUDA graph capture");
  const RelaxedCaptureMode relaxed;  // an eager call: no capture elsewhere refuses it (capture_mode.h)
  check_stream_device("poison_workspace", stream);
  refuse_unrunnable(kernel_for(plan.fc1, Epilogue::kSwiglu), tokens);  // (a tactic not compiled in: by name)
  kernel_for(plan.fc2, Epilogue::kFinalize);
  if (called_) FP4MOE_CUDA_CHECK(cudaStreamWaitEvent(stream, *call_done_, 0));
  try {
    ensure_workspace(tokens, plan, stream);
    // Values only: 0xFF bytes are NaN as bf16 and as fp32. The ids, offsets, row maps and
    // counters are not poisoned: a wrong index there is an out-of-bounds access, not a wrong answer.
    for (DeviceBuffer* b : {&topk_w_, &row_weight_, &act_, &partials_, &rows_out_, &x_perm_, &fused_partials_})
      if (b->bytes() > 0) FP4MOE_CUDA_CHECK(cudaMemsetAsync(b->get(), 0xFF, b->bytes(), stream));
  } catch (...) {
    mark_done_after_throw(stream);  // fills already enqueued: the next call must wait for them
    throw;
  }
  FP4MOE_CUDA_CHECK(cudaEventRecord(*call_done_, stream));
  called_ = true;
}

void GpuMoeLayerImpl::run(const uint16_t* hidden, const float* logits, int64_t tokens, uint16_t* out,
                          cudaStream_t stream, const LayerPlan* plan, void* const* events) {
  const std::lock_guard<std::mutex> lock(call_mutex_);
  const ScopedDevice on_device(device_);
  const bool eager = capture_status("forward", stream) == cudaStreamCaptureStatusNone;
  FP4MOE_CHECK(eager || events == nullptr, "forward_with_events: not during a CUDA graph capture (the events would "
               "be nodes of the graph, never recorded into the caller's events on replay)");
  // An eager call runs relaxed: a capture on another thread (or on another stream of this one)
  // neither refuses its queries and allocations nor is invalidated by them (capture_mode.h).
  std::optional<RelaxedCaptureMode> relaxed;
  if (eager) relaxed.emplace();
  // Under capture a stream of another GPU is not caught here (the query would break the
  // capture); its first captured launch fails instead, and the capture with it.
  if (eager) check_stream_device("forward", stream);
  // A captured call is ordered when its graph is launched, by whoever launches it; an eager call
  // is ordered here after the previous eager call - always, not only when the stream handle
  // differs: two threads' cudaStreamPerThread are one handle and two streams.
  if (eager && called_) FP4MOE_CUDA_CHECK(cudaStreamWaitEvent(stream, *call_done_, 0));
  try {
    enqueue(hidden, logits, tokens, out, stream, plan, events);
  } catch (...) {
    if (eager) mark_done_after_throw(stream);  // part of the call may be enqueued: the next waits for it
    throw;
  }
  if (!eager)  // the graph addresses the workspace as it is now
    for (const DeviceBuffer* b : workspace())
      if (b->get() && std::find(captured_.begin(), captured_.end(), b->get()) == captured_.end()) captured_.push_back(b->get());
  if (eager) {
    FP4MOE_CUDA_CHECK(cudaEventRecord(*call_done_, stream));
    called_ = true;
  }
}

void GpuMoeLayerImpl::enqueue(const uint16_t* hidden, const float* logits, int64_t tokens,
                              uint16_t* out, cudaStream_t stream, const LayerPlan* plan_in,
                              void* const* events) {
  const std::function<void(int)> record = [&](int i) {
    if (events) FP4MOE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(events[i]), stream));
  };
  FP4MOE_CHECK(tokens >= 1 && tokens <= (int64_t{1} << 24), "forward: token count ", tokens,
               " out of [1, 2^24]");
  check_layer_io("forward", hidden, logits, out, tokens, cfg_.hidden, cfg_.num_experts, device_);
  const LayerPlan plan = plan_in ? *plan_in : plan_for(tokens);
  const W4a16Kernel& k1 = kernel_for(plan.fc1, Epilogue::kSwiglu);
  const W4a16Kernel& k2 = kernel_for(plan.fc2, Epilogue::kFinalize);
  cudaStream_t s = stream;
  // What can refuse the call (a kernel that cannot run at this shape) refuses it before anything
  // is enqueued, and before the workspace grows for it: a refused call must neither keep the
  // memory of a batch it does not run nor, under capture, be reported as wanting a reserve().
  refuse_unrunnable(k1, tokens);
  grid_for(k1, k1.dynamic_smem_bytes(smem_shape(tokens, cfg_.hidden)));
  grid_for(k2, k2.dynamic_smem_bytes(smem_shape(tokens, cfg_.intermediate)));
  ensure_workspace(tokens, plan, s);
  if (k1.tactic.family == Family::kW4a16Gemv) {
    run_gemv(hidden, logits, tokens, out, s, k1, k2, record);
    return;
  }
  if (k1.tactic.family == Family::kW4a16Fused) {
    run_fused(hidden, logits, tokens, out, s, k1, record);
    return;
  }

  kernels::RoutingParams rp = routing_params(logits, tokens);
  rp.expert_offsets = offsets_.get<int>();
  rp.row_token = row_token_.get<int>();
  rp.row_weight = row_weight_.get<float>();
  rp.pair_row = pair_row_.get<int>();
  rp.chunk_counts = chunk_counts_.get<int>();
  // FC2's tokens (act) in the order its family reads: fragment order with whole 64-element
  // chunks for the prefill family (FC1's epilogue writes the real columns; a partial last chunk
  // scatters them, so the chunk is zeroed first), natural rows of I for the decode family.
  const int64_t I = cfg_.intermediate;
  const bool act_fragment_order = k2.tactic.family == Family::kW4a16Wgmma;
  const int64_t act_stride = act_fragment_order ? kernels::fragment_order_pitch(I) : I;
  record(0);
  if (act_fragment_order && I % kernels::kFragmentChunk != 0)
    FP4MOE_CUDA_CHECK(cudaMemset2DAsync(act_.get<uint16_t>() + act_stride - kernels::kFragmentChunk, act_stride * 2, 0,
                                        kernels::kFragmentChunk * 2, tokens * slots_, s));
  // Programmatic dependent launches (sm_90+): each kernel's CTAs become resident while the
  // previous one runs and wait for its inputs with griddepcontrol.wait.
  const bool pdl = gpu_.sm >= 90;
  kernels::launch_routing(rp, s, pdl);
  // The prefill family takes whole token tiles by the copy engine: gather FC1's rows first.
  const bool gathered = k1.tactic.family == Family::kW4a16Wgmma;
  if (gathered)
    kernels::launch_gather_rows(hidden, cfg_.hidden, pair_row_.get<int>(), tokens, slots_, cfg_.hidden,
                                x_perm_.get<uint16_t>(), pdl, s);
  record(1);

  W4a16GemmParams f1 = gemm_params(0, fc1_, w13_, s13_, gate_gs_, cfg_.hidden);
  f1.expert_offsets = offsets_.get<int>();
  f1.x = gathered ? x_perm_.get<uint16_t>() : hidden;
  f1.x_stride = gathered ? kernels::fragment_order_pitch(cfg_.hidden) : cfg_.hidden;
  f1.x_rows = gathered ? tokens * slots_ : tokens;
  f1.gather = gathered ? nullptr : row_token_.get<int>();
  f1.scale_b = up_gs_.get<float>();
  f1.partials = partials_.get<float>();
  f1.unit_counters = unit_counters_.get<int>();
  f1.unit_ticket = unit_tickets_.get<int>();
  f1.act_out = act_.get<uint16_t>();
  f1.act_cols = static_cast<int>(I);
  f1.act_stride = act_stride;
  f1.act_fragment_order = act_fragment_order;
  const int smem1 = k1.dynamic_smem_bytes(smem_shape(tokens, cfg_.hidden));
  k1.launch(f1, grid_for(k1, smem1), smem1, pdl, s);
  record(2);

  W4a16GemmParams f2 = gemm_params(1, fc2_, w2_, s2_, down_gs_, cfg_.intermediate);
  f2.expert_offsets = offsets_.get<int>();
  f2.offsets_ready = true;  // written by the routing, which FC1 waited for
  f2.x = act_.get<uint16_t>();
  f2.x_stride = act_stride;
  f2.x_rows = tokens * slots_;
  f2.partials = partials_.get<float>();
  f2.unit_counters = unit_counters_.get<int>();
  f2.row_weight = row_weight_.get<float>();
  f2.row_token = row_token_.get<int>();
  f2.pair_row = pair_row_.get<int>();
  f2.slots = slots_;
  f2.rows_out = rows_out_.get<uint16_t>();
  f2.grid_barrier = grid_barrier_.get<unsigned>();
  f2.unit_ticket = unit_tickets_.get<int>() + 1;
  f2.out = out;
  const int smem2 = k2.dynamic_smem_bytes(smem_shape(tokens, cfg_.intermediate));
  k2.launch(f2, grid_for(k2, smem2), smem2, pdl, s);
  // The decode family's finalize ends in a launch of its own; the prefill family's in FC2.
  if (k2.tactic.family == Family::kW4a16Mma)
    kernels::launch_finalize_slots(rows_out_.get<uint16_t>(), row_weight_.get<float>(), pair_row_.get<int>(), slots_,
                                   tokens, cfg_.hidden, out, pdl, s);
  record(3);
}

// The small-batch path (w4a16_gemv): two launches. FC1 routes the batch in each CTA (CTA 0
// stores the routing) and writes act in [token][slot] order; FC2 reads the routing and act and
// writes the output, the weighted sum over each token's groups included. No permutation, no
// stream-K partials, no slot-sum launch.
void GpuMoeLayerImpl::run_gemv(const uint16_t* hidden, const float* logits, int64_t tokens, uint16_t* out,
                               cudaStream_t s, const W4a16Kernel& k1, const W4a16Kernel& k2,
                               const std::function<void(int)>& record) {
  kernels::RoutingParams rp = routing_params(logits, tokens);
  const int64_t I = cfg_.intermediate;
  record(0);
  record(1);  // the routing is FC1's prologue: its phase is empty

  W4a16GemmParams f1 = gemm_params(0, fc1_, w13_, s13_, gate_gs_, cfg_.hidden);
  f1.x = hidden;
  f1.x_stride = cfg_.hidden;
  f1.scale_b = up_gs_.get<float>();
  f1.act_out = act_.get<uint16_t>();
  f1.act_cols = static_cast<int>(I);
  f1.act_stride = I;
  f1.slots = slots_;
  f1.tokens = static_cast<int>(tokens);
  f1.routing = rp;
  f1.routing_ready = routing_ready_.get<unsigned>();
  const kernels::W4a16SmemShape shape1 = smem_shape(tokens, cfg_.hidden);
  const int smem1 = k1.dynamic_smem_bytes(shape1);
  const int grid1 = std::min(grid_for(k1, smem1), k1.max_blocks(shape1, f1.rowtiles));
  k1.launch(f1, grid1, smem1, /*pdl=*/false, s);  // the layer's first kernel
  record(2);

  W4a16GemmParams f2 = gemm_params(1, fc2_, w2_, s2_, down_gs_, cfg_.intermediate);
  f2.x = act_.get<uint16_t>();
  f2.x_stride = I;
  f2.slots = slots_;
  f2.tokens = static_cast<int>(tokens);
  f2.routing = rp;
  f2.routing_ready = routing_ready_.get<unsigned>();
  f2.out = out;
  const kernels::W4a16SmemShape shape2 = smem_shape(tokens, I);
  const int smem2 = k2.dynamic_smem_bytes(shape2);
  const int grid2 = std::min(grid_for(k2, smem2), k2.max_blocks(shape2, f2.rowtiles));
  k2.launch(f2, grid2, smem2, /*pdl=*/gpu_.sm >= 90, s);
  record(3);
}

// The fused path (w4a16_fused): the whole layer in one persistent launch - every CTA routes the
// batch, FC1's and FC2's items and the slot sums are drawn from one ticket counter
// (kernels/gemm/sm90_w4a16_fused_layer.cuh). act holds [token][slot] rows of I.
void GpuMoeLayerImpl::run_fused(const uint16_t* hidden, const float* logits, int64_t tokens, uint16_t* out,
                                cudaStream_t s, const W4a16Kernel& k, const std::function<void(int)>& record) {
  FP4MOE_CHECK(k.launch_fused != nullptr, "GPU layer: ", format_tactic(k.tactic), " has no whole-layer launch");
  kernels::W4a16FusedParams p;
  // What every family's launch of a GEMM shares (gemm_params), as the fused kernel reads it.
  const auto gemm = [&](const W4a16GemmParams& g, const float* scale_b) {
    return kernels::FusedGemm{g.weights, g.scales, g.rowtiles, g.kgroups, g.rows, g.k, g.scale_a, scale_b};
  };
  const W4a16GemmParams g1 = gemm_params(0, fc1_, w13_, s13_, gate_gs_, cfg_.hidden);
  const W4a16GemmParams g2 = gemm_params(1, fc2_, w2_, s2_, down_gs_, cfg_.intermediate);
  p.fc1 = gemm(g1, up_gs_.get<float>());
  p.fc2 = gemm(g2, nullptr);
  p.sm_clock[0] = g1.sm_clock;
  p.sm_clock[1] = g2.sm_clock;
  p.routing = routing_params(logits, tokens);
  p.tokens = static_cast<int>(tokens);
  p.slots = slots_;
  p.groups = groups_;
  p.hidden = hidden;
  p.hidden_stride = cfg_.hidden;
  p.act = act_.get<uint16_t>();
  p.act_stride = cfg_.intermediate;
  p.out = out;
  const kernels::FusedGrid fg = fused_grid_of(k.tactic);
  const int active = kernels::fused_max_active(groups_, static_cast<int>(tokens), slots_);
  p.ws.counters = fused_counters_.get<int>();
  p.ws.fc1_part = fused_partials_.get<float>();
  p.ws.fc2_part = fused_partials_.get<float>() + kernels::fused_fc1_part_floats(active, fg, k.tactic.tile_rows,
                                                                                  static_cast<int>(tokens));
  if (kernels::fused_fc1_part_chunks(fg) == 1) p.ws.fc1_part = nullptr;
#if FP4MOE_FUSED_TRACE
  // Scratch builds: the last call's timeline, written to $FP4MOE_FUSED_TRACE_FILE when the layer goes.
  const int grid = grid_for(k, k.dynamic_smem_bytes(smem_shape(tokens, cfg_.hidden)));
  const size_t trace_bytes = size_t(grid) * kernels::kFusedTraceWordsPerCta * 8;
  if (trace_.bytes() < trace_bytes) {
    trace_.resize(trace_bytes);
    FP4MOE_CUDA_CHECK(cudaMemsetAsync(trace_.get(), 0, trace_bytes, s));  // (the legacy stream may be unusable)
  }
  trace_grid_ = grid;
  p.trace = trace_.get<unsigned long long>();
#endif
  record(0);
  record(1);  // the routing is inside the one launch: its phase is empty
  const int smem = k.dynamic_smem_bytes(smem_shape(tokens, cfg_.hidden));
  k.launch_fused(p, grid_for(k, smem), smem, s);
  record(2);
  record(3);  // FC2 and the slot sums too
}

}  // namespace

std::unique_ptr<GpuMoeLayer> GpuMoeLayer::create(const MoeWeights& weights,
                                                 const LayerOptions& options) {
  return std::make_unique<GpuMoeLayerImpl>(weights, options);
}

}  // namespace fp4moe
