// Resource model, profile (a): our own kernel families; dispatch to profile (b) for CUTLASS.
#include "fp4moe/resource_model.h"
#include "plan/model_options.h"

#include <algorithm>
#include <sstream>
#include <tuple>

#include "fp4moe/error.h"
#include "kernels/gemm/fused_params.h"
#include "kernels/gemm/fused_shapes.h"
#include "kernels/gemm/gemv_shapes.h"
#include "kernels/gemm/mma_shapes.h"
#include "kernels/gemm/wgmma_shapes.h"
#include "plan/cutlass_profile.h"
#include "plan/report_header.h"

namespace fp4moe {
namespace {

int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// The report's identity and, for our families (NVFP4 weights only), whether the tactic can run
// at all: `arch_ok` false -> unsupported with `arch_reason`.
ResourceReport w4a16_report(const char* family, const Tactic& t, const GpuSpec& gpu, DataType dtype, bool arch_ok,
                            const std::string& arch_reason) {
  FP4MOE_CHECK(t.warps > 0 && t.tile_rows > 0 && t.tile_tokens > 0 && t.tile_k > 0, "resource model: ",
               format_tactic(t), " has no warps or an empty tile");
  ResourceReport r = report_header(t, gpu, dtype);
  r.threads = t.warps * 32;
  if (dtype != DataType::kNvfp4) {
    r.supported = false;
    r.reason = std::string(family) + " streams NVFP4 weights only (" + to_string(dtype) + " is not implemented)";
  } else if (!arch_ok) {
    r.supported = false;
    r.reason = arch_reason;
  }
  return r;
}

// The end of a reason: the request's total against the limit, and by how much it is over.
std::string against_limit(const ResourceReport& r) {
  const bool under = r.total_bytes <= r.limit_bytes;
  return std::to_string(r.total_bytes) + (under ? " <= " : " > ") + std::to_string(r.limit_bytes) +
         (under ? "" : " by " + std::to_string(r.total_bytes - r.limit_bytes) + " B");
}

// What a pipeline of fewer than 2 stages lacks: its bytes may be under the limit, it still never fits.
const char* stages_note(const ResourceReport& r) {
  return r.stages < 2 ? "; but the pipeline needs at least 2 stages" : "";
}

// CTAs per SM by shared memory (+ the per-block reservation) and threads; 0 when it does not fit.
int ctas_per_sm(const ResourceReport& r, const GpuSpec& gpu) {
  const int64_t per_cta = r.total_bytes + gpu.smem_reserved_per_block;
  return r.fits ? static_cast<int>(std::min<int64_t>(gpu.smem_per_sm / per_cta, gpu.max_threads_per_sm / r.threads))
                : 0;
}

// w4a16_mma (src/kernels/gemm/sm80_w4a16_grouped_gemm.cuh, W4a16Traits): every byte of the
// kernel's request, in the kernel's order.
// The routed experts among the GEMM's groups (the shared expert, where there is one, is a group).
int routed_experts(const ModelOptions& o) { return o.experts - (o.shared_expert ? 1 : 0); }

ResourceReport model_w4a16(const Tactic& t, const GpuSpec& gpu, DataType dtype, const ModelOptions& o) {
  ResourceReport r = w4a16_report("w4a16_mma", t, gpu, dtype, gpu.sm >= 80,
                                  "w4a16_mma needs mma.sync bf16 (sm_80+), " + gpu.arch_name() + " has none");
  if (!r.supported) return r;
  const int64_t rows = t.tile_rows, tokens = t.tile_tokens, k = t.tile_k;
  r.stage_items = {
      {"weights: " + std::to_string(rows) + " rows x " + std::to_string(k) + " K x 1/2 B (e2m1)", rows * k / 2},
      {"block scales: " + std::to_string(rows) + " rows x " + std::to_string(k / 16) + " (UE5M3, 1 B)", rows * k / 16},
      {"tokens: " + std::to_string(tokens) + " x " + std::to_string(k) + " K x 2 B (bf16)", tokens * k * 2},
  };
  for (const auto& i : r.stage_items) r.stage_bytes += i.bytes;
  r.builder_stage_bytes = r.stage_bytes;
  const int64_t prefix = round_up(4 * (o.experts + 1), 16);
  const int64_t sched = round_up(4 * (t.warps + 1), 16);
  const int64_t barriers = 64;  // 8 mbarriers, the weight copies' (used on sm_90+, reserved on all)
  r.kernel_bytes = barriers + prefix + sched;
  r.epilogue_bytes = 0;  // the finalize keeps nothing in shared memory (rows_out, finalize_slots)
  r.other_items = {
      {"pipeline: 8 mbarriers of the bulk weight copies (sm_90+), 8 B each", barriers},
      {"scheduler: unit prefix, 4 B x (" + std::to_string(o.experts) + " groups + 1), 16-B aligned", prefix},
      {"scheduler: scan warp sums + stream-K flag, 4 B x (" + std::to_string(t.warps) + " + 1)", sched},
  };
  if (t.stages == 0) {
    // Auto: as many stages as fit (at most 8) beside the fixed parts.
    r.stages_auto = true;
    r.stages = static_cast<int>(std::min<int64_t>(8, (r.limit_bytes - barriers - prefix - sched) / r.stage_bytes));
  } else {
    r.stages = t.stages;
  }
  r.mainloop_bytes = r.stages * r.stage_bytes;
  r.total_bytes = r.mainloop_bytes + r.kernel_bytes + r.epilogue_bytes;
  r.fits = r.stages >= 2 && r.total_bytes <= r.limit_bytes;
  std::ostringstream why;
  if (r.stages < 2) {
    why << "a pipeline needs 2 stages; " << r.stages << " of " << r.stage_bytes << " B fit";
  } else {
    why << r.stages << " x " << r.stage_bytes << " (stage) + " << r.kernel_bytes << " (barriers, scheduler) + "
        << r.epilogue_bytes << " (epilogue) = " << against_limit(r);
  }
  r.reason = why.str();
  r.ctas_per_sm = ctas_per_sm(r, gpu);
  return r;
}

// w4a16_wgmma (src/kernels/gemm/sm90_w4a16_wgmma_grouped_gemm.cuh, W4a16WgmmaTraits): every byte
// of the kernel's request, in the kernel's order.
ResourceReport model_w4a16_wgmma(const Tactic& t, const GpuSpec& gpu, DataType dtype, const ModelOptions& o) {
  ResourceReport r = w4a16_report("w4a16_wgmma", t, gpu, dtype, gpu.has_wgmma(),
                                  "w4a16_wgmma needs wgmma, setmaxnreg and the bulk tensor copy of sm_90a; " +
                                      gpu.arch_name() + " has no wgmma (the w4a16_mma family runs there)");
  if (!r.supported) return r;
  const int64_t rows = t.tile_rows, tokens = t.tile_tokens, k = t.tile_k;
  r.stage_items = {
      {"B: " + std::to_string(tokens) + " tokens x " + std::to_string(k) + " K x 2 B (bf16, swizzled; A is dequantized into registers)", tokens * k * 2},
      {"raw weights: " + std::to_string(rows) + " rows x " + std::to_string(k) + " K x 1/2 B (e2m1)", rows * k / 2},
      {"raw block scales: " + std::to_string(rows / 16) + " row tiles x 256 B (a K group's UE5M3)", rows / 16 * 256},
  };
  for (const auto& i : r.stage_items) r.stage_bytes += i.bytes;
  r.builder_stage_bytes = r.stage_bytes;
  const int64_t slack = 1024;
  const int64_t prefix = round_up(4 * (o.experts + 1), 16);
  const int64_t sched = round_up(4 * (t.warps + 1), 16);
  r.stages = t.stages;
  const int64_t barriers = 16 * r.stages;
  const int64_t ring = 32 * r.stages;
  r.kernel_bytes = slack + barriers + ring + prefix + sched;
  r.epilogue_bytes = 0;  // the finalize sums in a second phase, out of global memory
  r.other_items = {
      {"alignment slack: the swizzled tiles need 1024-B alignment", slack},
      {"mbarriers: full + empty per stage, 8 B each", barriers},
      {"scheduler: unit ring, the unit each stage starts (decoded, with its global scales), 32 B per stage", ring},
      {"scheduler: unit prefix, 4 B x (" + std::to_string(o.experts) + " groups + 1), 16-B aligned", prefix},
      {"scheduler: scan warp sums, 4 B x (" + std::to_string(t.warps) + " + 1)", sched},
  };
  r.mainloop_bytes = r.stages * r.stage_bytes;
  r.total_bytes = r.mainloop_bytes + r.kernel_bytes + r.epilogue_bytes;
  r.fits = r.stages >= 2 && r.total_bytes <= r.limit_bytes;
  std::ostringstream why;
  why << r.stages << " x " << r.stage_bytes << " (stage) + " << r.kernel_bytes << " (alignment, barriers, scheduler) + "
      << r.epilogue_bytes << " (epilogue) = " << against_limit(r) << stages_note(r);
  r.reason = why.str();
  r.ctas_per_sm = ctas_per_sm(r, gpu);
  return r;
}

// w4a16_gemv (src/kernels/gemm/sm80_w4a16_gemv.cuh, W4a16GemvTraits::layout): no pipeline in
// shared memory (each warp keeps its `stages` K groups of weights in flight in registers); what
// it stages is the batch - FC1 its T hidden rows, FC2 the T x slots act rows - so the request
// depends on the batch, K and the slots as well as on the tactic.
ResourceReport model_w4a16_gemv(const Tactic& t, const GpuSpec& gpu, DataType dtype, const ModelOptions& o) {
  ResourceReport r = w4a16_report("w4a16_gemv", t, gpu, dtype, gpu.sm >= 80,
                                  "w4a16_gemv needs mma.sync bf16 (sm_80+), " + gpu.arch_name() + " has none");
  if (!r.supported) return r;
  const bool swiglu = t.epilogue == Epilogue::kSwiglu;
  const int64_t pairs = int64_t{o.tokens} * o.slots, active = std::min<int64_t>(o.experts, pairs);
  const int64_t row_tiles = t.tile_rows / 16;
  const int64_t pitch = (o.k + 255) / 256 * 512 + 16;
  const int64_t rows = swiglu ? o.tokens : pairs;
  r.stages = t.stages;
  r.stage_bytes = 0;  // the stages are registers
  r.builder_stage_bytes = 0;
  r.stage_items = {};
  r.mainloop_bytes = rows * pitch;
  r.epilogue_bytes = 2 * t.warps * row_tiles * 512;
  r.other_items = {
      {"routing: group of each (token, slot), 4 B x " + std::to_string(pairs) + ", 16-B aligned", round_up(4 * pairs, 16)},
      {"routing: weight of each (token, slot), 4 B x " + std::to_string(pairs), round_up(4 * pairs, 16)},
      {"active groups: bitmap of " + std::to_string(o.experts) + " groups", round_up(4 * ((o.experts + 31) / 32), 16)},
      {"active groups: ascending list, 4 B x " + std::to_string(active), round_up(4 * active, 16)},
      {"slot of each (active group, column), 1 B x 8 x " + std::to_string(active), round_up(8 * active, 16)},
  };
  if (!swiglu)
    r.other_items.push_back({"finalize: weight of each (active group, column), 4 B x 8 x " + std::to_string(active),
                             round_up(32 * active, 16)});
  r.other_items.push_back({"active group count", 16});
  r.kernel_bytes = 0;
  for (const auto& i : r.other_items) r.kernel_bytes += i.bytes;
  r.other_items.push_back({"partial tiles of the warps' K slices: 2 buffers x " + std::to_string(t.warps) + " warps x " +
                               std::to_string(row_tiles) + " row tiles x 512 B",
                           r.epilogue_bytes});
  r.other_items.push_back({"B: " + std::to_string(rows) + (swiglu ? " hidden rows" : " act rows (tokens x slots)") +
                               " x (" + std::to_string((o.k + 255) / 256 * 256) + " K x 2 B + 16), zero past K " +
                               std::to_string(o.k),
                           r.mainloop_bytes});
  r.total_bytes = r.mainloop_bytes + r.kernel_bytes + r.epilogue_bytes;
  const bool batch_ok = o.tokens >= 1 && o.tokens <= t.tile_tokens;
  // FC1 routes in-kernel with 8 experts per lane: 256 routed experts (+ a shared one) at most.
  const int routed = routed_experts(o);
  const bool experts_ok = routed <= kernels::kGemvMaxRoutedExperts;
  r.fits = batch_ok && experts_ok && r.total_bytes <= r.limit_bytes;
  std::ostringstream why;
  if (!experts_ok) {
    why << routed << " routed experts; the in-kernel routing takes " << kernels::kGemvMaxRoutedExperts << " at most";
  } else if (!batch_ok) {
    why << "a batch of " << o.tokens << " tokens; the family takes 1.." << t.tile_tokens;
  } else {
    why << r.mainloop_bytes << " (B) + " << r.kernel_bytes << " (routing, active groups) + " << r.epilogue_bytes
        << " (partial tiles) = " << against_limit(r) << " at T = " << o.tokens
        << ", K = " << o.k << ", " << o.slots << " slots";
  }
  r.reason = why.str();
  r.ctas_per_sm = ctas_per_sm(r, gpu);
  return r;
}

// w4a16_fused (src/kernels/gemm/sm90_w4a16_fused_layer.cuh): the kernel's own layout function
// (kernels/gemm/fused_params.h, fused_smem_layout), item by item. The stages are one K group of
// an item's rows each; the rest is the pipeline's barriers, the item ring and the batch's routing
// (every CTA routes the batch, up to 8 tokens), which depend on the groups and the slots.
ResourceReport model_w4a16_fused(const Tactic& t, const GpuSpec& gpu, DataType dtype, const ModelOptions& o) {
  ResourceReport r = w4a16_report("w4a16_fused", t, gpu, dtype, gpu.sm >= 90,
                                  "w4a16_fused needs the bulk copy engine and mbarrier transaction counts (sm_90+); " +
                                      gpu.arch_name() + " has none (the w4a16_mma family runs there)");
  if (!r.supported) return r;
  const kernels::W4a16SmemShape shape{o.experts, o.tokens, o.k, o.slots};
  const kernels::FusedSmemLayout l = kernels::fused_smem_layout(t.tile_rows, t.stages, shape);
  const int64_t rows = t.tile_rows, row_tiles = rows / 16;
  const int pairs = kernels::kFusedTokens * o.slots;
  const int active = kernels::fused_max_active(o.experts, kernels::kFusedTokens, o.slots);
  r.stage_items = {
      {"weights: " + std::to_string(rows) + " rows x 256 K x 1/2 B (e2m1), one K group", row_tiles * 2048},
      {"block scales: " + std::to_string(row_tiles) + " row tiles x 256 B (UE5M3)", row_tiles * 256},
      {"B: 8 token rows x (256 K x 2 B + 16 B bank offset)", int64_t{kernels::kFusedTokens} * kernels::kFusedTokenPitch},
  };
  r.stage_bytes = l.stage_bytes;
  r.builder_stage_bytes = r.stage_bytes;
  r.stages = t.stages;
  r.mainloop_bytes = int64_t{t.stages} * l.stage_bytes;
  r.other_items = {
      {"mbarriers: full + empty per stage, full + empty + stored per item slot, the routing's, 8 B each (" +
           std::to_string(kernels::fused_barrier_count(t.stages)) + "), 16-B aligned",
       l.items - l.barriers},
      {"item ring: " + std::to_string(kernels::kFusedItemSlots) + " entries x " + std::to_string(kernels::kFusedItemBytes) +
           " B",
       l.active_count - l.items},
      {"the active-group count", l.pair_ids - l.active_count},
      {"routing: group of each (token, slot), 4 B x 8 x " + std::to_string(o.slots), l.pair_w - l.pair_ids},
      {"routing: weight of each (token, slot), 4 B x " + std::to_string(pairs), l.pair_a - l.pair_w},
      {"routing: active index of each (token, slot), 4 B x " + std::to_string(pairs), l.bitmap - l.pair_a},
      {"active groups: bitmap of " + std::to_string(o.experts) + " groups", l.active - l.bitmap},
      {"active groups: list, 4 B x " + std::to_string(active), l.col_slot - l.active},
      {"slot of each (active group, column), 1 B x 8 x " + std::to_string(active), l.total - l.col_slot},
  };
  r.kernel_bytes = l.total - r.mainloop_bytes;
  r.epilogue_bytes = 0;  // the epilogues write global memory (act, partial tiles, the output)
  r.total_bytes = l.total;
  // The in-kernel routing holds 8 experts a lane: 256 routed experts (+ a shared one) at most.
  const int routed = routed_experts(o);
  const bool experts_ok = routed <= kernels::kFusedMaxRoutedExperts;
  const bool batch_ok = o.tokens >= 1 && o.tokens <= kernels::kFusedTokens;
  r.fits = experts_ok && batch_ok && r.stages >= 2 && r.total_bytes <= r.limit_bytes;
  std::ostringstream why;
  if (!experts_ok) {
    why << routed << " routed experts; the in-kernel routing takes " << kernels::kFusedMaxRoutedExperts << " at most";
  } else if (!batch_ok) {
    why << "a batch of " << o.tokens << " tokens; the family takes 1.." << kernels::kFusedTokens;
  } else {
    why << r.stages << " x " << r.stage_bytes << " (stage) + " << r.kernel_bytes
        << " (barriers, item ring, routing) = " << against_limit(r) << stages_note(r);
  }
  r.reason = why.str();
  r.ctas_per_sm = ctas_per_sm(r, gpu);
  return r;
}

}  // namespace

const char* to_string(DataType d) {
  switch (d) {
    case DataType::kNvfp4: return "nvfp4";
    case DataType::kMxfp4: return "mxfp4";
    case DataType::kBf16: return "bf16";
  }
  return "?";
}

DataType parse_data_type(const std::string& s) {
  if (s == "nvfp4") return DataType::kNvfp4;
  if (s == "mxfp4") return DataType::kMxfp4;
  if (s == "bf16") return DataType::kBf16;
  FP4MOE_FAIL("unknown data type '", s, "' (nvfp4, mxfp4, bf16)");
}

void check_model_options(const ModelOptions& opt, const char* who) {
  FP4MOE_CHECK(opt.experts >= 1 && opt.experts <= (1 << 20), who, ": experts = ", opt.experts, " is outside [1, 2^20]");
  FP4MOE_CHECK(opt.tokens >= 1 && opt.tokens <= (1 << 24), who, ": tokens = ", opt.tokens, " is outside [1, 2^24]");
  FP4MOE_CHECK(opt.k >= 16 && opt.k <= (1 << 20) && opt.k % 16 == 0, who, ": K = ", opt.k,
               " is not a multiple of 16 in [16, 2^20]");
  FP4MOE_CHECK(opt.slots >= 1 && opt.slots <= (1 << 20) + 1, who, ": slots = ", opt.slots, " is outside [1, 2^20 + 1]");
}

ResourceReport model_resources(const Tactic& t, const GpuSpec& gpu, DataType dtype, const ModelOptions& opt) {
  FP4MOE_CHECK(gpu.smem_per_block_optin > 0, "resource model: GPU '", gpu.name,
               "' has no shared-memory limit");
  // The same ranges as a parsed tactic, and options no GEMM has outside these: every size the
  // model forms from them (stage bytes, scheduler state, the batch staged) then fits an int and
  // is positive - a zero total once divided an SM's shared memory.
  if (const std::string e = tactic_range_error(t); !e.empty()) FP4MOE_FAIL("resource model: tactic ", format_tactic(t), ": ", e);
  check_model_options(opt, "resource model");
  switch (t.family) {
    case Family::kW4a16Mma: return model_w4a16(t, gpu, dtype, opt);
    case Family::kCutlassSm120: return model_cutlass_sm120(t, gpu, dtype, opt);
    case Family::kCutlassSm100: return model_cutlass_sm100(t, gpu, dtype, opt);
    case Family::kW4a16Wgmma: return model_w4a16_wgmma(t, gpu, dtype, opt);
    case Family::kW4a16Gemv: return model_w4a16_gemv(t, gpu, dtype, opt);
    case Family::kW4a16Fused: return model_w4a16_fused(t, gpu, dtype, opt);
  }
  FP4MOE_FAIL("resource model: unknown family");
}

std::vector<Tactic> compiled_w4a16_tactics() {
  std::vector<Tactic> v;
  // Each family's shapes' table and shape -> tactic mapping, the ones its instantiation files
  // read: decode (with the plain epilogue's own table), prefill (sm_90a), small batch.
  const auto add = [&v](const auto& shapes, Epilogue ep) {
    for (const auto& s : shapes) v.push_back(kernels::shape_tactic(s, ep));
  };
  for (Epilogue ep : {Epilogue::kSwiglu, Epilogue::kFinalize}) add(kernels::kMmaShapes, ep);
  add(kernels::kMmaShapesNone, Epilogue::kNone);
  for (Epilogue ep : {Epilogue::kSwiglu, Epilogue::kFinalize}) add(kernels::kWgmmaShapes, ep);
  for (Epilogue ep : {Epilogue::kSwiglu, Epilogue::kFinalize}) add(kernels::kGemvShapes, ep);
  for (Epilogue ep : {Epilogue::kSwiglu, Epilogue::kFinalize}) add(kernels::kFusedShapes, ep);
  return v;
}

std::vector<Tactic> listed_tactics(Family f, Epilogue e) {
  std::vector<Tactic> v;
  if (f == Family::kW4a16Mma || f == Family::kW4a16Wgmma || f == Family::kW4a16Gemv || f == Family::kW4a16Fused) {
    for (const Tactic& t : compiled_w4a16_tactics())
      if (t.family == f && t.epilogue == e) v.push_back(t);
    return v;
  }
  std::vector<std::tuple<int, int, int>> tiles;
  if (f == Family::kCutlassSm120) {
    tiles = {{128, 32, 128}, {128, 32, 256}, {128, 64, 128}, {128, 64, 256}, {128, 128, 128},
             {128, 128, 256}, {128, 256, 128}, {256, 128, 128}};
  } else if (f == Family::kCutlassSm100) {
    tiles = {{128, 64, 256}, {128, 128, 256}, {128, 256, 256}, {128, 128, 128}, {128, 256, 128},
             {256, 128, 128}};
  }
  for (auto [m, n, k] : tiles)
    for (bool swap : {false, true}) v.push_back(Tactic{f, m, n, k, 0, 0, 1, e, swap});
  return v;
}

}  // namespace fp4moe
