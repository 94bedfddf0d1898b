// The tactic heuristic: the family switch and the documented token-tile rule on a GPU where
// everything fits, and the fallback on GPUs with less shared memory per block (every choice
// fits, by the resource model).
#include "fp4moe/heuristic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "fp4moe/error.h"
#include "fp4moe/resource_model.h"

namespace fp4moe {
namespace {

std::string fc1(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu) {
  return format_tactic(heuristic_plan(cfg, tokens, gpu).fc1);
}
std::string fc2(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu) {
  return format_tactic(heuristic_plan(cfg, tokens, gpu).fc2);
}
std::string fc1(const MoeConfig& cfg, int64_t tokens, const std::string& gpu) { return fc1(cfg, tokens, resolve_gpu(gpu)); }
std::string fc2(const MoeConfig& cfg, int64_t tokens, const std::string& gpu) { return fc2(cfg, tokens, resolve_gpu(gpu)); }

TEST(Heuristic, TokenTileFollowsTheMeanTokensPerExpert) {
  const MoeConfig glm5 = MoeConfig::glm5();  // E 256, top-8: mean T / 32 tokens per expert
  const GpuSpec h200 = resolve_gpu("h200");
  EXPECT_EQ(heuristic_token_tile(glm5, 1, h200), 8);
  EXPECT_EQ(heuristic_token_tile(glm5, 192, h200), 8);    // mean 6
  EXPECT_EQ(heuristic_token_tile(glm5, 193, h200), 16);
  EXPECT_EQ(heuristic_token_tile(glm5, 512, h200), 16);   // mean 16
  EXPECT_EQ(heuristic_token_tile(glm5, 1024, h200), 16);  // mean 32
  EXPECT_EQ(heuristic_token_tile(glm5, 1025, h200), 64);
  EXPECT_EQ(heuristic_token_tile(glm5, 65536, h200), 64);
  EXPECT_EQ(heuristic_token_tile(glm5, 1024, resolve_gpu("b200")), 16);  // 54 GB/s an SM
}

// Where each SM gets fewer bytes a second (the H100, 25 GB/s an SM; sm_120, ~10) wide experts
// take the 32-token tile from a mean of 16 to 32; narrow experts, and the means around it, not.
TEST(Heuristic, TokenTileOf32OnLowBandwidthGpusForWideExperts) {
  const MoeConfig glm5 = MoeConfig::glm5();
  for (const char* name : {"h100", "rtx-pro-6000"}) {
    const GpuSpec gpu = resolve_gpu(name);
    EXPECT_EQ(heuristic_token_tile(glm5, 192, gpu), 8) << name;
    EXPECT_EQ(heuristic_token_tile(glm5, 511, gpu), 16) << name;  // mean 15.97
    EXPECT_EQ(heuristic_token_tile(glm5, 512, gpu), 32) << name;  // mean 16
    EXPECT_EQ(heuristic_token_tile(glm5, 1024, gpu), 32) << name;
    EXPECT_EQ(heuristic_token_tile(glm5, 1025, gpu), 64) << name;
    EXPECT_EQ(heuristic_token_tile(MoeConfig::glm5_tp8(), 1024, gpu), 16) << name;  // narrow
  }
  // An H100 as the sm_80 device code sees it (no prefill family): the 3-stage 32-token tile.
  GpuSpec h100_as_sm80 = resolve_gpu("h100");
  h100_as_sm80.sm = 80;
  EXPECT_EQ(fc1(glm5, 1024, h100_as_sm80), "w4a16_mma:m128n32k256:s3:w4:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 512, h100_as_sm80), "w4a16_mma:m128n32k256:s3:w4:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 384, h100_as_sm80), "w4a16_mma:m256n16k256:s2:w8:sk1:swiglu");
  // The H100 itself runs the prefill family there.
  EXPECT_EQ(heuristic_plan(glm5, 1024, resolve_gpu("h100")).fc1.family, Family::kW4a16Wgmma);
}

// Every entry point checks its config and token count first (each divides by E).
TEST(Heuristic, EveryEntryPointRejectsBadInput) {
  const GpuSpec h200 = resolve_gpu("h200");
  MoeConfig none;  // 0 experts
  EXPECT_THROW(heuristic_token_tile(none, 1, h200), Error);
  EXPECT_THROW(heuristic_tactic(none, 1, h200, Epilogue::kSwiglu), Error);
  const MoeConfig glm5 = MoeConfig::glm5();
  for (const int64_t t : {int64_t{0}, int64_t{-1}, INT64_MIN}) {
    EXPECT_THROW(heuristic_token_tile(glm5, t, h200), Error) << t;
    EXPECT_THROW(heuristic_tactic(glm5, t, h200, Epilogue::kSwiglu), Error) << t;
    EXPECT_THROW(heuristic_plan(glm5, t, h200), Error) << t;
  }
  MoeConfig many = MoeConfig::glm5();
  many.num_experts = INT32_MAX;  // E + 1 would overflow where the scheduler state is sized
  many.routing.top_k = 1;
  EXPECT_THROW(heuristic_plan(many, 1, h200), Error);
  // A width past 2^20 is refused, not narrowed to int (2^32 + 6144 would have modelled K = 6144).
  MoeConfig wide = MoeConfig::glm5();
  wide.hidden = (int64_t{1} << 32) + 6144;
  EXPECT_THROW(gemm_model_options(wide, 1, Epilogue::kSwiglu), Error);
}

TEST(Heuristic, PlansOnTheH200) {
  const MoeConfig glm5 = MoeConfig::glm5();
  // The rule's choices; docs/HEURISTIC.md has the measurements behind each (the tuner's ranking,
  // docs/measurements/h200_glm5_tune.json, predates the 256-row tiles).
  // Wide experts at one to four tokens: the whole layer in one launch (sm_90), the same tactic for
  // both GEMMs.
  EXPECT_EQ(fc1(glm5, 1, "h200"), "w4a16_fused:m128n8k1024:s3:w6:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 1, "h200"), "w4a16_fused:m128n8k1024:s3:w6:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 2, "h200"), "w4a16_fused:m128n8k3072:s3:w6:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 2, "h200"), "w4a16_fused:m128n8k3072:s3:w6:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 3, "h200"), "w4a16_fused:m128n8k3072:s3:w6:sk1:swiglu");
  EXPECT_EQ(fc1(glm5, 4, "h200"), "w4a16_fused:m128n8k6144:s3:w6:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 4, "h200"), "w4a16_fused:m128n8k6144:s3:w6:sk1:finalize");
  // From T = 5 256 rows, 8 warps, 2 stages: two CTAs per SM.
  EXPECT_EQ(fc1(glm5, 5, "h200"), "w4a16_mma:m256n8k256:s2:w8:sk1:swiglu");
  EXPECT_EQ(fc1(glm5, 128, "h200"), "w4a16_mma:m256n8k256:s2:w8:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 5, "h200"), "w4a16_mma:m256n8k256:s2:w8:sk1:finalize");
  EXPECT_EQ(fc2(glm5, 128, "h200"), "w4a16_mma:m256n8k256:s2:w8:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 256, "h200"), "w4a16_mma:m256n16k256:s2:w8:sk1:swiglu");
  EXPECT_EQ(fc1(glm5, 319, "h200"), "w4a16_mma:m256n16k256:s2:w8:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 319, "h200"), "w4a16_mma:m256n16k256:s2:w8:sk1:finalize");
  // From 10 tokens per expert the prefill family (sm_90a): 64-token tiles of 256 rows (four
  // consumer warpgroups, 256 K a stage), 128 from 56, 256 from 96.
  EXPECT_EQ(fc1(glm5, 320, "h200"), "w4a16_wgmma:m256n64k256:s3:w20:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 320, "h200"), "w4a16_wgmma:m256n64k256:s3:w20:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 512, "h200"), "w4a16_wgmma:m256n64k256:s3:w20:sk1:swiglu");
  // Narrow experts (glm5-tp8, I = 256) from 16.
  const MoeConfig tp8 = MoeConfig::preset("glm5-tp8");
  EXPECT_EQ(fc1(tp8, 511, "h200"), "w4a16_mma:m256n16k256:s2:w8:sk1:swiglu");
  EXPECT_EQ(fc1(tp8, 512, "h200"), "w4a16_wgmma:m256n64k256:s3:w20:sk1:swiglu");
  // Narrow experts: the small-batch family for one to three tokens, then the 8-token tile with 2
  // stages at every T it covers (256 rows from T = 5).
  EXPECT_EQ(fc1(tp8, 1, "h200"), "w4a16_gemv:m16n8k256:s2:w6:sk1:swiglu");
  EXPECT_EQ(fc2(tp8, 1, "h200"), "w4a16_gemv:m16n8k256:s2:w6:sk1:finalize");
  EXPECT_EQ(fc1(tp8, 2, "h200"), "w4a16_gemv:m16n8k256:s2:w6:sk1:swiglu");
  EXPECT_EQ(fc1(tp8, 3, "h200"), "w4a16_gemv:m16n8k256:s2:w6:sk1:swiglu");
  EXPECT_EQ(fc1(tp8, 4, "h200"), "w4a16_mma:m128n8k256:s2:w4:sk1:swiglu");
  EXPECT_EQ(fc1(tp8, 5, "h200"), "w4a16_mma:m256n8k256:s2:w8:sk1:swiglu");
  EXPECT_EQ(fc1(tp8, 192, "h200"), "w4a16_mma:m256n8k256:s2:w8:sk1:swiglu");
  EXPECT_EQ(fc2(tp8, 64, "h200"), "w4a16_mma:m256n8k256:s2:w8:sk1:finalize");
  EXPECT_EQ(fc1(tp8, 768, "h200"), "w4a16_wgmma:m256n64k256:s3:w20:sk1:swiglu");
  // Narrow experts' FC2 (K = 256: a single K group, one stage a unit) as well.
  EXPECT_EQ(fc2(tp8, 768, "h200"), "w4a16_wgmma:m256n64k256:s3:w20:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 1024, "h200"), "w4a16_wgmma:m256n64k256:s3:w20:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 1024, "h200"), "w4a16_wgmma:m256n64k256:s3:w20:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 1791, "h200"), "w4a16_wgmma:m256n64k256:s3:w20:sk1:swiglu");
  // Means 56..103: the four-warpgroup 256 x 128 tile where its rows fit (for wide experts only
  // up to 96, below); from 104 the three-warpgroup 192-row tiles where their rows fit (glm5 FC1:
  // 4096 rows, 3% padding; FC2: 6144, none), not for glm5-tp8's 512-row FC1 (12.5%).
  EXPECT_EQ(fc1(glm5, 1792, "h200"), "w4a16_wgmma:m256n128k64:s7:w20:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 1792, "h200"), "w4a16_wgmma:m256n128k64:s7:w20:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 3071, "h200"), "w4a16_wgmma:m256n128k64:s7:w20:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 3071, "h200"), "w4a16_wgmma:m256n128k64:s7:w20:sk1:finalize");
  // Wide experts leave the 256 x 128 tile for 192 x 176 from a mean of 96 (T = 3072).
  EXPECT_EQ(fc1(glm5, 3072, "h200"), "w4a16_wgmma:m192n176k128:s3:w16:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 3327, "h200"), "w4a16_wgmma:m192n176k128:s3:w16:sk1:finalize");
  // 104..111: the 192 x 144 tile (two fragment buffers), then 192 x 176.
  EXPECT_EQ(fc1(glm5, 3328, "h200"), "w4a16_wgmma:m192n144k64:s7:w16:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 3328, "h200"), "w4a16_wgmma:m192n144k64:s7:w16:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 3583, "h200"), "w4a16_wgmma:m192n144k64:s7:w16:sk1:swiglu");
  EXPECT_EQ(fc1(glm5, 3584, "h200"), "w4a16_wgmma:m192n176k128:s3:w16:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 3584, "h200"), "w4a16_wgmma:m192n176k128:s3:w16:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 5119, "h200"), "w4a16_wgmma:m192n176k128:s3:w16:sk1:swiglu");
  // 160..239: glm5's FC1 (its rows padded by the 192-row blocks) takes the 256-token tile, where
  // most experts would spill just past 176 tokens; FC2 (no padding) stays on 192 x 176.
  EXPECT_EQ(fc1(glm5, 5120, "h200"), "w4a16_wgmma:m128n256k64:s5:w12:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 5120, "h200"), "w4a16_wgmma:m192n176k128:s3:w16:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 7679, "h200"), "w4a16_wgmma:m128n256k64:s5:w12:sk1:swiglu");
  EXPECT_EQ(fc1(glm5, 7680, "h200"), "w4a16_wgmma:m192n176k128:s3:w16:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 16384, "h200"), "w4a16_wgmma:m192n176k128:s3:w16:sk1:finalize");
  // Narrow experts' FC1 (512 rows) keeps the 256 x 128 tile up to a mean of 128 (T = 4096).
  EXPECT_EQ(fc1(tp8, 2048, "h200"), "w4a16_wgmma:m256n128k64:s7:w20:sk1:swiglu");
  EXPECT_EQ(fc1(tp8, 3328, "h200"), "w4a16_wgmma:m256n128k64:s7:w20:sk1:swiglu");
  EXPECT_EQ(fc1(tp8, 4095, "h200"), "w4a16_wgmma:m256n128k64:s7:w20:sk1:swiglu");
  EXPECT_EQ(fc1(tp8, 4096, "h200"), "w4a16_wgmma:m128n256k64:s5:w12:sk1:swiglu");
  // Narrow experts' FC2 (K = 256) takes the 256 x 128 tile from 56, but 192 x 176 at means
  // 104..183 (T = 3328..5887).
  EXPECT_EQ(fc2(tp8, 2048, "h200"), "w4a16_wgmma:m256n128k64:s7:w20:sk1:finalize");
  EXPECT_EQ(fc2(tp8, 3327, "h200"), "w4a16_wgmma:m256n128k64:s7:w20:sk1:finalize");
  EXPECT_EQ(fc2(tp8, 3328, "h200"), "w4a16_wgmma:m192n176k128:s3:w16:sk1:finalize");
  EXPECT_EQ(fc2(tp8, 5887, "h200"), "w4a16_wgmma:m192n176k128:s3:w16:sk1:finalize");
  EXPECT_EQ(fc2(tp8, 5888, "h200"), "w4a16_wgmma:m256n128k64:s7:w20:sk1:finalize");
  EXPECT_EQ(fc2(tp8, 16384, "h200"), "w4a16_wgmma:m256n128k64:s7:w20:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 65536, "h200"), "w4a16_wgmma:m192n176k128:s3:w16:sk1:swiglu");
  EXPECT_EQ(fc1(tp8, 65536, "h200"), "w4a16_wgmma:m128n256k64:s5:w12:sk1:swiglu");  // 512 rows: 12.5% padding
}

// The H100 SXM (25 GB/s of DRAM bandwidth an SM against the H200's 36): wide experts take the
// prefill family from 3/8 of a token per expert, not 10 (kPrefillMinTokensLowBandwidth); narrow
// experts and the fused family's sizes as on the H200.
TEST(Heuristic, PlansOnTheH100) {
  const MoeConfig glm5 = MoeConfig::glm5();
  EXPECT_EQ(fc1(glm5, 1, "h100"), "w4a16_fused:m128n8k1024:s3:w6:sk1:swiglu");
  EXPECT_EQ(fc1(glm5, 11, "h100"), "w4a16_mma:m256n8k256:s2:w8:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 11, "h100"), "w4a16_mma:m256n8k256:s2:w8:sk1:finalize");
  for (const int64_t t : {12, 16, 64, 127, 128, 256, 319, 1024}) {
    EXPECT_EQ(fc1(glm5, t, "h100"), "w4a16_wgmma:m256n64k256:s3:w20:sk1:swiglu") << t;
    EXPECT_EQ(fc2(glm5, t, "h100"), "w4a16_wgmma:m256n64k256:s3:w20:sk1:finalize") << t;
  }
  const MoeConfig tp8 = MoeConfig::preset("glm5-tp8");
  EXPECT_EQ(fc1(tp8, 511, "h100"), "w4a16_mma:m256n16k256:s2:w8:sk1:swiglu");
  EXPECT_EQ(fc1(tp8, 512, "h100"), "w4a16_wgmma:m256n64k256:s3:w20:sk1:swiglu");
  // The switch reads the GPU's bandwidth per SM, whichever its name: an H200 with the H100's
  // bandwidth plans as the H100, and one whose bandwidth is unknown (0) as the H200.
  GpuSpec slow = resolve_gpu("h200");
  slow.mem_bandwidth_gbs = 3350;
  EXPECT_EQ(heuristic_plan(glm5, 64, slow).fc1.family, Family::kW4a16Wgmma);
  GpuSpec unknown = resolve_gpu("h200");
  unknown.mem_bandwidth_gbs = 0;
  EXPECT_EQ(heuristic_plan(glm5, 64, unknown).fc1.family, Family::kW4a16Mma);
  EXPECT_EQ(prefill_min_tokens(glm5, resolve_gpu("h100")), kPrefillMinTokensLowBandwidth);
  EXPECT_EQ(prefill_min_tokens(glm5, resolve_gpu("h200")), kPrefillMinTokens);
  EXPECT_EQ(prefill_min_tokens(tp8, resolve_gpu("h100")), kPrefillMinTokensNarrow);
}

// Narrow experts where each SM gets few bytes a second (measured on an H100, seventy-first session).
TEST(Heuristic, NarrowExpertsOnLowBandwidthGpus) {
  const MoeConfig glm5 = MoeConfig::glm5();
  const MoeConfig tp8 = MoeConfig::preset("glm5-tp8");
  // Where each SM gets fewer bytes a second (the H100, sm_120) the small-batch family up to 4
  // tokens, with 8 warps from 3; then the 128-row 8-token tile up to a mean of 1 (T = 32).
  for (const char* name : {"h100", "rtx-pro-6000"}) {
    EXPECT_EQ(fc1(tp8, 2, name), "w4a16_gemv:m16n8k256:s2:w6:sk1:swiglu") << name;
    EXPECT_EQ(fc1(tp8, 3, name), "w4a16_gemv:m16n8k256:s2:w8:sk1:swiglu") << name;
    EXPECT_EQ(fc1(tp8, 4, name), "w4a16_gemv:m16n8k256:s2:w8:sk1:swiglu") << name;
    EXPECT_EQ(fc2(tp8, 4, name), "w4a16_gemv:m16n8k256:s2:w8:sk1:finalize") << name;
  }
  EXPECT_EQ(fc1(tp8, 5, "h100"), "w4a16_mma:m128n8k256:s2:w4:sk1:swiglu");
  EXPECT_EQ(fc2(tp8, 32, "h100"), "w4a16_mma:m128n8k256:s2:w4:sk1:finalize");
  EXPECT_EQ(fc1(tp8, 33, "h100"), "w4a16_mma:m256n8k256:s2:w8:sk1:swiglu");
  // Wide experts on the H100 keep the H200's rows.
  EXPECT_EQ(fc1(glm5, 8, "h100"), "w4a16_mma:m256n8k256:s2:w8:sk1:swiglu");
  // The H200 keeps its rule.
  EXPECT_EQ(fc1(tp8, 3, "h200"), "w4a16_gemv:m16n8k256:s2:w6:sk1:swiglu");
  EXPECT_EQ(fc1(tp8, 5, "h200"), "w4a16_mma:m256n8k256:s2:w8:sk1:swiglu");
}

TEST(Heuristic, PrefillFamilyOnlyWhereWgmmaExists) {
  const MoeConfig glm5 = MoeConfig::glm5();
  for (const char* gpu : {"b200", "rtx-pro-6000", "rtx-5090"})
    EXPECT_EQ(heuristic_plan(glm5, 65536, resolve_gpu(gpu)).fc1.family, Family::kW4a16Mma) << gpu;
}

TEST(Heuristic, FallsBackToWhatFitsOnSm120) {
  // 99 KB per block: the 3- and 4-stage 128 x 16, 128 x 32 and 128 x 64 tiles need more (105-155
  // KB), so the largest fitting token tile not above the rule's is taken, never a tactic that
  // cannot launch (the 2-stage 128 x 16 tile, 54 KB; the 2-stage 128 x 32 tile, 70 KB).
  const MoeConfig glm5 = MoeConfig::glm5();
  // The two-stage rule (T <= 4) fits there: 45 KB, two CTAs per SM. (The fused family, measured
  // on the H200 only, is not taken on Blackwell.)
  EXPECT_EQ(fc1(glm5, 1, "rtx-pro-6000"), "w4a16_mma:m128n8k256:s2:w4:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 1, "rtx-pro-6000"), "w4a16_mma:m128n8k256:s2:w4:sk1:finalize");
  EXPECT_EQ(fc1(glm5, 8, "rtx-pro-6000"), "w4a16_mma:m128n8k256:s4:w4:sk1:swiglu");  // s3: still 1 CTA/SM
  EXPECT_EQ(fc1(glm5, 256, "rtx-pro-6000"), "w4a16_mma:m128n16k256:s2:w4:sk1:swiglu");
  // Past the decode rule (prefill sizes: its wgmma tiles do not exist on sm_120) the 32-token
  // tile of two stages, the widest that fits (on an H100 1.22-1.50x faster than the 16-token one
  // there at glm5 and glm5-tp8 T = 2048-16384); and so from a mean of 16, where the low-bandwidth
  // rule asks for 32 tokens (1.16x at glm5 T = 512 on an H100); below it the 2-stage 128 x 16.
  EXPECT_EQ(fc1(glm5, 384, "rtx-pro-6000"), "w4a16_mma:m128n16k256:s2:w4:sk1:swiglu");
  EXPECT_EQ(fc1(glm5, 1024, "rtx-pro-6000"), "w4a16_mma:m128n32k256:s2:w4:sk1:swiglu");
  EXPECT_EQ(fc1(glm5, 4096, "rtx-pro-6000"), "w4a16_mma:m128n32k256:s2:w4:sk1:swiglu");
  EXPECT_EQ(fc2(glm5, 16384, "rtx-pro-6000"), "w4a16_mma:m128n32k256:s2:w4:sk1:finalize");
  EXPECT_EQ(fc1(MoeConfig::glm5_tp8(), 2048, "rtx-5090"), "w4a16_mma:m128n32k256:s2:w4:sk1:swiglu");
}

TEST(Heuristic, EveryChoiceFitsOnEveryKnownGpu) {
  for (const MoeConfig& cfg : {MoeConfig::glm5(), MoeConfig::glm5_tp8(), MoeConfig::deepseek_v3()})
    for (const GpuSpec& gpu : known_gpus())
      for (int64_t t : {1, 2, 7, 64, 300, 1000, 5000, 65536}) {
        const LayerPlan p = heuristic_plan(cfg, t, gpu);
        ModelOptions mo;
        mo.experts = cfg.num_experts + (cfg.has_shared_expert() ? 1 : 0);
        mo.tokens = static_cast<int>(std::min<int64_t>(t, 8));
        mo.slots = cfg.routing.top_k + (cfg.has_shared_expert() ? 1 : 0);
        for (const Tactic& tac : {p.fc1, p.fc2}) {
          mo.k = static_cast<int>(tac.epilogue == Epilogue::kSwiglu ? cfg.hidden : cfg.intermediate);
          EXPECT_TRUE(model_resources(tac, gpu, DataType::kNvfp4, mo).fits)
              << cfg.name << " T=" << t << " on " << gpu.name << ": " << format_tactic(tac);
        }
      }
}

}  // namespace
}  // namespace fp4moe
