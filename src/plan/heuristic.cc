// The tactic heuristic of both families (see include/fp4moe/heuristic.h, docs/HEURISTIC.md).
#include "fp4moe/heuristic.h"

#include <algorithm>

#include "fp4moe/error.h"
#include "fp4moe/resource_model.h"

namespace fp4moe {
namespace {

// The decode family's tactic for a token tile (all compiled, src/kernels/inst), as measured on
// the H200 (docs/HEURISTIC.md): 128 weight rows and 4 warps, except 8 warps for the 64-token
// tile. FC2 takes the same shape: with 3 stages its 128-row 8-token tile is 3-18% faster than
// the 64-row one at T = 2..128 (glm5, glm5-tp8). Stages: for the 8-token tile 2 while at most
// one expert in eight holds a token (kDecodeTwoStagesMaxMean: more, shorter stream-K ranges) and
// for narrow experts, else 4 (heuristic_tactic takes 3 where that adds a CTA per SM); 2 for the
// 16-token tile, which puts 4 CTAs on an H200 SM instead of 2 (one K group in flight per CTA,
// four CTAs: 6-10% faster than 4 stages at T = 256, 512 on glm5 and glm5-tp8); 3 for the 32-
// and 64-token tiles (two CTAs where they fit).
Tactic decode_tactic(int tokens, double mean, bool narrow, Epilogue ep) {
  const int stages = tokens == 8 ? (mean <= kDecodeTwoStagesMaxMean || narrow ? 2 : 4) : tokens == 16 ? 2 : 3;
  const int warps = tokens == 64 ? 8 : 4;
  return Tactic{Family::kW4a16Mma, 128, tokens, 256, stages, warps, 1, ep, false};
}

// The prefill family's tactic for a mean of `mean` tokens per expert: 64-token tiles (four
// consumer warpgroups per SM hide each other's per-stage chains, which bound the short wgmma of
// few tokens per expert: one CTA of 256 rows sharing its token tile, 3 stages of 256 K, or two
// CTAs of 128 rows, 7 stages of 64 K each), 128 (9 stages) or 256 (5 stages), about 195-207 KB
// of shared memory per SM each; in between, where their rows fit the GEMM's, the 256 x 128 tile
// (four consumer warpgroups, 7 stages, 198 KB) and the 192 x 144 and 192 x 176 tiles (three; 7
// stages of 64 K, 196 KB, and 3 of 128 K, 184 KB).
Tactic prefill_tactic(const MoeConfig& cfg, double mean, Epilogue ep) {
  const int64_t rows = ep == Epilogue::kSwiglu ? 2 * cfg.intermediate : cfg.hidden;
  const auto padded = [&](int64_t block) { return static_cast<double>((rows + block - 1) / block * block); };
  const auto rows_fit = [&](int64_t block) {
    return padded(block) <= padded(128) * (1.0 + kPrefillWideRowsMaxPadding);
  };
  const bool narrow = narrow_experts(cfg);
  const bool narrow_fc2 = ep == Epilogue::kFinalize && narrow;
  if (mean < kPrefillN128MinTokens && rows_fit(256))
    return Tactic{Family::kW4a16Wgmma, 256, 64, 256, 3, 20, 1, ep, false};
  // Narrow experts' FC2 (one K group a unit) within a band of means: past it, experts spill
  // beyond 176 tokens.
  if (narrow_fc2 && rows_fit(192) && mean >= kPrefillNarrowFc2N176MinTokens && mean < kPrefillNarrowFc2N176MaxTokens)
    return Tactic{Family::kW4a16Wgmma, 192, 176, 128, 3, 16, 1, ep, false};
  // From this mean the 192 x 176 tile below overtakes the 256 x 128 one for wide experts.
  const bool n176_first = !narrow && rows_fit(192) && mean >= kPrefillThreeWarpgroupsMinTokens;
  const double n128_max = narrow ? kPrefillFourWarpgroupsN128MaxTokensNarrow : kPrefillFourWarpgroupsN128MaxTokens;
  if (mean >= kPrefillN128MinTokens && rows_fit(256) && !n176_first && (mean < n128_max || narrow_fc2))
    return Tactic{Family::kW4a16Wgmma, 256, 128, 64, 7, 20, 1, ep, false};
  if (mean >= kPrefillFourWarpgroupsN128MaxTokens && mean < kPrefillThreeWarpgroupsN144MaxTokens && rows_fit(192))
    return Tactic{Family::kW4a16Wgmma, 192, 144, 64, 7, 16, 1, ep, false};
  // Where 192-row blocks pad the rows, the band in which most experts spill just past 176 tokens
  // (a narrow second unit, a whole dequantization) goes to the 256-token tile below.
  const bool spills_past_176 = padded(192) > padded(128) && mean >= kPrefillWideRowsSpillMinTokens &&
                               mean < kPrefillWideRowsSpillMaxTokens;
  if (mean >= kPrefillN128MinTokens && rows_fit(192) && !spills_past_176)
    return Tactic{Family::kW4a16Wgmma, 192, 176, 128, 3, 16, 1, ep, false};
  const int tokens = mean < kPrefillN128MinTokens ? 64 : mean < kPrefillN256MinTokens ? 128 : 256;
  const int stages = tokens == 64 ? 7 : tokens == 128 ? 9 : 5;
  return Tactic{Family::kW4a16Wgmma, 128, tokens, 64, stages, 12, 1, ep, false};
}

}  // namespace

ModelOptions gemm_model_options(const MoeConfig& cfg, int64_t tokens, Epilogue ep) {
  cfg.validate();  // its widths are within 2^20, so K below is the config's, not a wrapped int
  ModelOptions mo;
  mo.experts = cfg.num_experts + (cfg.has_shared_expert() ? 1 : 0);
  mo.shared_expert = cfg.has_shared_expert();
  mo.tokens = static_cast<int>(std::min<int64_t>(tokens, int64_t{1} << 24));  // forward()'s limit
  mo.k = static_cast<int>(ep == Epilogue::kSwiglu ? cfg.hidden : cfg.intermediate);
  mo.slots = cfg.routing.top_k + (cfg.has_shared_expert() ? 1 : 0);
  return mo;
}

namespace {
// Whether DRAM gives each SM of `gpu` few bytes a second (kPrefillLowBandwidthPerSmGbs): the
// H100, the workstation Blackwell GPUs; not the H200 or the B200.
bool low_bandwidth_per_sm(const GpuSpec& gpu) {
  return gpu.mem_bandwidth_gbs > 0 && gpu.sm_count > 0 &&
         gpu.mem_bandwidth_gbs / gpu.sm_count < kPrefillLowBandwidthPerSmGbs;
}
}  // namespace

double prefill_min_tokens(const MoeConfig& cfg, const GpuSpec& gpu) {
  if (narrow_experts(cfg)) return kPrefillMinTokensNarrow;
  return low_bandwidth_per_sm(gpu) ? kPrefillMinTokensLowBandwidth : kPrefillMinTokens;
}

namespace {
// What every heuristic entry point checks first (the means below divide by E).
void check_plan_input(const MoeConfig& cfg, int64_t tokens, const char* what) {
  cfg.validate();
  FP4MOE_CHECK(tokens >= 1, what, ": token count must be >= 1, got ", tokens);
}

// The rules' one measure of a batch: routed tokens on an expert, on average (T * k / E).
double mean_tokens_per_expert(const MoeConfig& cfg, int64_t tokens) {
  return static_cast<double>(tokens) * cfg.routing.top_k / cfg.num_experts;
}

// The rules themselves, on input the public entry points have checked (once a plan: the layer
// plans every forward call).
int token_tile(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu) {
  const double mean = mean_tokens_per_expert(cfg, tokens);
  if (mean <= kDecodeN8MaxMean) return 8;
  if (mean >= kDecodeN32MinMeanLowBandwidth && mean <= kDecodeN16MaxMean && low_bandwidth_per_sm(gpu) &&
      !narrow_experts(cfg))
    return 32;
  if (mean <= kDecodeN16MaxMean) return 16;
  return 64;
}

Tactic tactic_for(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu, Epilogue ep) {
  const ModelOptions mo = gemm_model_options(cfg, tokens, ep);
  const auto fits = [&](const Tactic& t) { return model_resources(t, gpu, DataType::kNvfp4, mo).fits; };
  const double mean = mean_tokens_per_expert(cfg, tokens);
  if (gpu.has_wgmma() && mean >= prefill_min_tokens(cfg, gpu)) {
    const Tactic prefill = prefill_tactic(cfg, mean, ep);
    if (fits(prefill)) return prefill;
  }
  const Tactic preferred = decode_tactic(token_tile(cfg, tokens, gpu), mean, narrow_experts(cfg), ep);
  if (fits(preferred)) {
    const auto ctas = [&](const Tactic& t) { return model_resources(t, gpu, DataType::kNvfp4, mo).ctas_per_sm; };
    // Beyond the almost empty experts of the 2-stage rule, the 8- and 16-token tiles take 256
    // weight rows with 8 warps and 2 stages where two such CTAs share an SM: each warp computes
    // what it did in the 128-row, 4-warp tile, but a unit covers twice the rows, so its tokens
    // are copied and its bookkeeping and stream-K cuts paid once per 256 rows
    // (kDecodeWideRowsMinMean; narrow experts on GPUs of low bandwidth per SM from a larger one).
    const double wide_rows_min = narrow_experts(cfg) && low_bandwidth_per_sm(gpu)
                                     ? kDecodeWideRowsMinMeanNarrowLowBandwidth
                                     : kDecodeWideRowsMinMean;
    if (mean > wide_rows_min && (preferred.tile_tokens == 8 || preferred.tile_tokens == 16)) {
      const Tactic wide{Family::kW4a16Mma, 256, preferred.tile_tokens, 256, 2, 8, 1, ep, false};
      if (fits(wide) && ctas(wide) >= 2) return wide;
    }
    // The 8-token tiles are bound by issuing the dequantization as much as by DRAM: one stage
    // fewer, where that lets one more CTA (more warps) onto an SM, measured 2-6% faster on the
    // H200 at T = 1..64 (m128n8: 2 -> 3 CTAs; docs/HEURISTIC.md).
    Tactic shallow = preferred;
    shallow.stages = 3;
    if (preferred.tile_tokens == 8 && fits(shallow) && ctas(shallow) > ctas(preferred)) return shallow;
    return preferred;
  }
  // A GPU with less shared memory per block (sm_120: 99 KB) cannot hold the larger tiles. Take
  // the compiled tactic that fits with the largest token tile not above the preferred one, then
  // the most weight rows, then the most warps: the closest smaller shape, never a silent failure.
  // Not the 256-row tiles, which the rule takes only where two CTAs of them fit (measured with
  // two an SM); one CTA of them an SM, as on sm_120, is unmeasured.
  std::optional<Tactic> best;
  for (const Tactic& t : compiled_w4a16_tactics()) {
    if (t.family != Family::kW4a16Mma || t.epilogue != ep || t.tile_tokens > preferred.tile_tokens ||
        t.tile_rows > 128 || !fits(t))
      continue;
    if (!best || std::tie(t.tile_tokens, t.tile_rows, t.warps) > std::tie(best->tile_tokens, best->tile_rows, best->warps))
      best = t;
  }
  FP4MOE_CHECK(best, "heuristic: no compiled ", to_string(ep), " tactic fits on ", gpu.name, " (",
               gpu.smem_per_block_optin, " B of shared memory per block)");
  return *best;
}
}  // namespace

int heuristic_token_tile(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu) {
  check_plan_input(cfg, tokens, "heuristic token tile");
  return token_tile(cfg, tokens, gpu);
}

Tactic heuristic_tactic(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu, Epilogue ep) {
  check_plan_input(cfg, tokens, "heuristic tactic");
  return tactic_for(cfg, tokens, gpu, ep);
}

// Six warps, two K groups in flight each: three CTAs per SM, so that every block of a narrow
// single-token FC1 is resident at once; eight from a few tokens (docs/HEURISTIC.md has the
// measurements).
Tactic gemv_tactic(int64_t tokens, const GpuSpec& gpu, Epilogue ep) {
  const int64_t eight_warps_from =
      low_bandwidth_per_sm(gpu) ? kGemvEightWarpsMinTokensLowBandwidth : kGemvEightWarpsMinTokens;
  return Tactic{Family::kW4a16Gemv, 16, 8, 256, 2, tokens >= eight_warps_from ? 8 : 6, 1, ep, false};
}

// 128 rows an item, 3 stages: three CTAs of a producer, an epilogue and four consumer warps per
// H200 SM; a routed expert's FC1 item of 4 K groups for one token (glm5: 1536 items, enough for
// the launch to end evenly), 12 for two or three, 24 for four (glm5's whole K: no partial tiles,
// no arrivals; docs/HEURISTIC.md).
Tactic fused_tactic(int64_t tokens, Epilogue ep) {
  const int tile_k = tokens <= 1 ? 1024 : tokens <= 3 ? 3072 : 6144;
  return Tactic{Family::kW4a16Fused, 128, 8, tile_k, 3, 6, 1, ep, false};
}

LayerPlan heuristic_plan(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu) {
  check_plan_input(cfg, tokens, "heuristic plan");
  const auto fits_both = [&](const LayerPlan& p) {
    for (const Tactic& t : {p.fc1, p.fc2})
      if (!model_resources(t, gpu, DataType::kNvfp4, gemm_model_options(cfg, tokens, t.epilogue)).fits) return false;
    return true;
  };
  // Measured on the H200 only: Blackwell (sm_100, sm_120) keeps the stream-K family until it is.
  if (gpu.sm == 90 && !narrow_experts(cfg) && tokens <= kFusedMaxTokens && cfg.num_experts <= 256) {
    const LayerPlan fused{fused_tactic(tokens, Epilogue::kSwiglu), fused_tactic(tokens, Epilogue::kFinalize)};
    if (fits_both(fused)) return fused;
  }
  const int64_t gemv_max = low_bandwidth_per_sm(gpu) ? kGemvMaxTokensNarrowLowBandwidth : kGemvMaxTokensNarrow;
  if (narrow_experts(cfg) && tokens <= gemv_max && cfg.num_experts <= 256) {
    const LayerPlan gemv{gemv_tactic(tokens, gpu, Epilogue::kSwiglu), gemv_tactic(tokens, gpu, Epilogue::kFinalize)};
    if (fits_both(gemv)) return gemv;
  }
  // Stream-K balances any unit count over the GPU's CTAs, so the GPU enters only through what fits.
  return LayerPlan{tactic_for(cfg, tokens, gpu, Epilogue::kSwiglu), tactic_for(cfg, tokens, gpu, Epilogue::kFinalize)};
}

}  // namespace fp4moe
