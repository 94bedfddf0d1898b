// Resource model: the byte arithmetic of several tactics per architecture, pinned to the
// values sizeof() of the real CUTLASS types gives (tests/cutlass_crosscheck re-derives them
// from the headers when enabled), and the acceptance cases of the motivating deployment.
#include <gtest/gtest.h>

#include <tuple>

#include "fp4moe/error.h"
#include "fp4moe/hw.h"
#include "fp4moe/resource_model.h"

namespace fp4moe {
namespace {

Tactic cutlass(Family f, int m, int n, int k, Epilogue e, bool swap) {
  return Tactic{f, m, n, k, 0, 0, 1, e, swap};
}

struct Pinned {
  int m, n, k;
  Epilogue e;
  bool swap;
  int stages;
  int64_t total;
};

TEST(ResourceModel, CutlassSm120MatchesTheRealSharedStorage) {
  const GpuSpec pro = *find_known_gpu("rtx-pro-6000");
  // sizeof(GemmKernel::SharedStorage) of the TRT-LLM recipe, CUTLASS v4.5, nvcc 13.0, sm_120a.
  const Pinned cases[] = {
      {128, 128, 128, Epilogue::kNone, false, 4, 89088},     {128, 128, 128, Epilogue::kFinalize, false, 4, 93184},
      {128, 128, 128, Epilogue::kFinalize, true, 4, 93184},   {128, 128, 256, Epilogue::kFinalize, false, 2, 93184},
      {128, 256, 128, Epilogue::kNone, false, 3, 98304},     {128, 256, 128, Epilogue::kFinalize, false, 3, 102400},
      {128, 256, 128, Epilogue::kFinalize, true, 2, 74752},   {256, 128, 128, Epilogue::kFinalize, false, 3, 102400},
      {256, 128, 128, Epilogue::kNone, true, 3, 98304},      {128, 64, 128, Epilogue::kNone, false, 6, 101376},
      {128, 64, 256, Epilogue::kFinalize, false, 2, 76800},   {128, 32, 128, Epilogue::kFinalize, true, 6, 93184},
  };
  for (const Pinned& c : cases) {
    const ResourceReport r =
        model_resources(cutlass(Family::kCutlassSm120, c.m, c.n, c.k, c.e, c.swap), pro, DataType::kNvfp4);
    EXPECT_EQ(r.stages, c.stages) << format_tactic(r.tactic);
    EXPECT_EQ(r.total_bytes, c.total) << format_tactic(r.tactic);
    EXPECT_EQ(r.fits, c.total <= 101376) << format_tactic(r.tactic);
  }
}

TEST(ResourceModel, CutlassSm100MatchesTheRealSharedStorage) {
  const GpuSpec b200 = *find_known_gpu("b200");
  const Pinned cases[] = {
      {128, 64, 256, Epilogue::kFinalize, false, 7, 222720}, {128, 128, 256, Epilogue::kNone, false, 5, 206336},
      {128, 128, 256, Epilogue::kFinalize, true, 5, 206848}, {128, 256, 256, Epilogue::kFinalize, false, 3, 204800},
      {256, 128, 256, Epilogue::kFinalize, false, 7, 222720}, {128, 128, 128, Epilogue::kNone, false, 11, 224768},
      {256, 128, 128, Epilogue::kFinalize, false, 14, 222720}, {256, 256, 256, Epilogue::kFinalize, false, 4, 194560},
  };
  for (const Pinned& c : cases) {
    const ResourceReport r =
        model_resources(cutlass(Family::kCutlassSm100, c.m, c.n, c.k, c.e, c.swap), b200, DataType::kNvfp4);
    EXPECT_EQ(r.stages, c.stages) << format_tactic(r.tactic);
    EXPECT_EQ(r.total_bytes, c.total) << format_tactic(r.tactic);
    EXPECT_TRUE(r.fits) << r.reason;
  }
}

TEST(ResourceModel, MotivatingDeploymentExplained) {
  // RTX PRO 6000, NVFP4 x NVFP4, bf16 out, FINALIZE: the two small tiles fit, the two large do
  // not - by the same arithmetic, no tile special-cased.
  const GpuSpec pro = *find_known_gpu("rtx-pro-6000");
  auto fin = [&](int m, int n, int k) {
    return model_resources(cutlass(Family::kCutlassSm120, m, n, k, Epilogue::kFinalize, false), pro, DataType::kNvfp4);
  };
  EXPECT_TRUE(fin(128, 128, 128).fits);
  EXPECT_TRUE(fin(128, 128, 256).fits);
  const ResourceReport wide = fin(128, 256, 128), tall = fin(256, 128, 128);
  EXPECT_FALSE(wide.fits);
  EXPECT_FALSE(tall.fits);
  EXPECT_EQ(wide.total_bytes - wide.limit_bytes, 1024);
  EXPECT_NE(wide.reason.find("over by 1024 B"), std::string::npos) << wide.reason;
  // The builder planned 3 stages with 208 B to spare: 100944 - 17408 - 3 * 27776.
  EXPECT_EQ(wide.builder_stage_bytes, 27776);
  EXPECT_EQ(wide.stages, 3);
  // The same four fit with H200 and B200 capacities; the H200 cannot run sm_120 code, and its
  // report says so first (the bytes are still worked out under its limit).
  for (const char* g : {"h200", "b200"}) {
    const GpuSpec gpu = *find_known_gpu(g);
    const Family f = gpu.sm == 100 ? Family::kCutlassSm100 : Family::kCutlassSm120;
    for (auto [m, n, k] : {std::tuple{128, 128, 128}, {128, 128, 256}, {128, 256, 128}, {256, 128, 128}}) {
      const ResourceReport r = model_resources(cutlass(f, m, n, k, Epilogue::kFinalize, false), gpu, DataType::kNvfp4);
      EXPECT_TRUE(r.fits) << g << " " << format_tactic(r.tactic) << ": " << r.reason;
      EXPECT_EQ(r.supported, gpu.sm == 100) << g << " " << format_tactic(r.tactic);
      if (gpu.sm == 90) {
        EXPECT_EQ(r.reason.find("cutlass_sm120 is sm_120/sm_121 code"), 0u) << r.reason;
      }
    }
  }
  // Nor does a GB10 (sm_121: no tcgen05) run sm_100 code, nor a B200 sm_120's.
  for (auto [g, f] : {std::pair{"gb10", Family::kCutlassSm100}, {"b200", Family::kCutlassSm120}})
    EXPECT_FALSE(model_resources(cutlass(f, 128, 128, 128, Epilogue::kFinalize, false), *find_known_gpu(g),
                                 DataType::kNvfp4).supported)
        << g;
  EXPECT_TRUE(model_resources(cutlass(Family::kCutlassSm120, 128, 128, 128, Epilogue::kNone, false),
                              *find_known_gpu("gb10"), DataType::kNvfp4).supported);
  // With the NONE epilogue all four fit on the RTX PRO 6000 too.
  for (auto [m, n, k] : {std::tuple{128, 128, 128}, {128, 128, 256}, {128, 256, 128}, {256, 128, 128}})
    EXPECT_TRUE(model_resources(cutlass(Family::kCutlassSm120, m, n, k, Epilogue::kNone, false), pro, DataType::kNvfp4).fits);
}

TEST(ResourceModel, OurDecodeFamilyByteArithmetic) {
  const GpuSpec h200 = *find_known_gpu("h200");
  // m128n8, 4 stages, 8 warps, finalize, 257 groups: stage 16384 + 2048 + 4096 = 22528.
  const Tactic t{Family::kW4a16Mma, 128, 8, 256, 4, 8, 1, Epilogue::kFinalize, false};
  const ResourceReport r = model_resources(t, h200, DataType::kNvfp4);
  EXPECT_EQ(r.stage_bytes, 22528);
  EXPECT_EQ(r.kernel_bytes, 64 + 1040 + 48);  // 8 mbarriers, prefix 4 * 258 -> 1040, 4 * 9 -> 48
  EXPECT_EQ(r.epilogue_bytes, 0);             // the finalize goes through rows_out
  EXPECT_EQ(r.total_bytes, 4 * 22528 + 1152);
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.ctas_per_sm, 2);  // 233472 / (91264 + 1024)
  // The same tile on sm_120 (99 KB per block) fits once; 64 tokens x 3 stages does not.
  const GpuSpec pro = *find_known_gpu("rtx-pro-6000");
  EXPECT_TRUE(model_resources(t, pro, DataType::kNvfp4).fits);
  const Tactic big{Family::kW4a16Mma, 128, 64, 256, 3, 8, 1, Epilogue::kFinalize, false};
  const ResourceReport rb = model_resources(big, pro, DataType::kNvfp4);
  EXPECT_FALSE(rb.fits);
  EXPECT_EQ(rb.stage_bytes, 16384 + 2048 + 32768);
  // Other data types are not implemented by the family: reported, not modelled.
  EXPECT_FALSE(model_resources(t, h200, DataType::kMxfp4).supported);
  // Every compiled tactic fits the H200 (the small-batch family at glm5's single token).
  ModelOptions one;
  one.tokens = 1;
  for (const Tactic& c : compiled_w4a16_tactics()) EXPECT_TRUE(model_resources(c, h200, DataType::kNvfp4, one).fits);
}

TEST(ResourceModel, SmallBatchFamilyStagesTheBatch) {
  const GpuSpec h200 = *find_known_gpu("h200");
  // FC2 (finalize) of glm5 (K = I = 2048, 9 slots, 257 groups), 4 warps, one row tile: the
  // batch's T x 9 act rows of 8 K groups x 512 B + 16 B each; tables for 9T pairs.
  const Tactic fc2{Family::kW4a16Gemv, 16, 8, 256, 3, 4, 1, Epilogue::kFinalize, false};
  auto at = [&](int tokens, int k, const Tactic& t) {
    ModelOptions o;
    o.tokens = tokens;
    o.k = k;
    return model_resources(t, h200, DataType::kNvfp4, o);
  };
  const ResourceReport one = at(1, 2048, fc2);
  EXPECT_EQ(one.mainloop_bytes, 9 * (8 * 512 + 16));  // B: 9 rows
  EXPECT_EQ(one.epilogue_bytes, 2 * 4 * 512);         // partial tiles, two buffers
  // pairs 36 + 36, bitmap 4 * 9 -> 48, active 36 -> 48, slots 72 -> 80, weights 288, count 16
  EXPECT_EQ(one.kernel_bytes, 48 + 48 + 48 + 48 + 80 + 288 + 16);
  EXPECT_EQ(one.total_bytes, one.mainloop_bytes + one.kernel_bytes + one.epilogue_bytes);
  EXPECT_TRUE(one.fits);
  // 6 tokens (54 act rows: 222048 + 2896 tables + 4096 partials = 229040 B) fit the 232448 B of
  // an H200 block; 7 (63 rows, 259 KB) do not: the reason says by how much and at which shape.
  EXPECT_EQ(at(6, 2048, fc2).total_bytes, 229040);
  EXPECT_TRUE(at(6, 2048, fc2).fits);
  const ResourceReport seven = at(7, 2048, fc2);
  EXPECT_FALSE(seven.fits);
  EXPECT_NE(seven.reason.find("T = 7, K = 2048"), std::string::npos) << seven.reason;
  // FC1 stages the T hidden rows only: 8 tokens of K = 6144 fit.
  const Tactic fc1{Family::kW4a16Gemv, 16, 8, 256, 3, 4, 1, Epilogue::kSwiglu, false};
  EXPECT_EQ(at(8, 6144, fc1).mainloop_bytes, 8 * (24 * 512 + 16));
  EXPECT_TRUE(at(8, 6144, fc1).fits);
  // A batch past the tile, or more than 256 routed experts (the in-kernel routing), never fits.
  EXPECT_FALSE(at(9, 6144, fc1).fits);
  ModelOptions wide;
  wide.experts = 513;
  wide.tokens = 1;
  EXPECT_FALSE(model_resources(fc1, h200, DataType::kNvfp4, wide).fits);
  // 257 groups are 256 routed experts and the shared one, or 257 routed experts without it: the
  // launch takes the first only, and so must the model (gemv and fused alike).
  const Tactic fused{Family::kW4a16Fused, 128, 8, 1024, 3, 6, 1, Epilogue::kSwiglu, false};
  for (const Tactic& t : {fc1, fused}) {
    ModelOptions groups_257;
    groups_257.experts = 257;
    groups_257.tokens = 1;
    EXPECT_TRUE(model_resources(t, h200, DataType::kNvfp4, groups_257).fits) << format_tactic(t);
    groups_257.shared_expert = false;
    const ResourceReport r = model_resources(t, h200, DataType::kNvfp4, groups_257);
    EXPECT_FALSE(r.fits) << format_tactic(t);
    EXPECT_NE(r.reason.find("257 routed experts"), std::string::npos) << r.reason;
  }
}

// Tactics and options built in code (not parsed) are checked as a parsed tactic is: a zero or
// negative size once made the model's total 0 bytes and its CTAs-per-SM a division by zero.
TEST(ResourceModel, RejectsTacticsAndOptionsOutsideTheirRanges) {
  const GpuSpec h200 = resolve_gpu("h200");
  const GpuSpec pro = resolve_gpu("rtx-pro-6000");
  const Tactic gemv{Family::kW4a16Gemv, 8, 8, 256, 2, 6, 1, Epilogue::kSwiglu, false};
  ASSERT_NO_THROW(model_resources(gemv, h200, DataType::kNvfp4, {22, 1, 6144, 9}));
  ModelOptions neg_k{22, 1, -1100, 22};
  EXPECT_THROW(model_resources(gemv, h200, DataType::kNvfp4, neg_k), Error);
  for (const ModelOptions& o : {ModelOptions{0, 1, 6144, 9}, ModelOptions{22, 0, 6144, 9},
                                ModelOptions{22, 1, 24, 9}, ModelOptions{22, 1, 6144, 0},
                                ModelOptions{(1 << 20) + 1, 1, 6144, 9}})
    EXPECT_THROW(model_resources(gemv, h200, DataType::kNvfp4, o), Error) << o.experts << " " << o.tokens << " " << o.k;
  Tactic huge_warps = gemv;
  huge_warps.warps = 1 << 27;
  EXPECT_THROW(model_resources(huge_warps, h200, DataType::kNvfp4), Error);
  Tactic odd_k = gemv;
  odd_k.tile_k = 24;
  EXPECT_THROW(model_resources(odd_k, h200, DataType::kNvfp4), Error);
  // An epilogue past the three: it would not survive encode/decode (its bits spill into split-K).
  Tactic bad_epilogue = gemv;
  bad_epilogue.epilogue = static_cast<Epilogue>(8);
  EXPECT_EQ(tactic_range_error(bad_epilogue), "unknown epilogue");
  EXPECT_THROW(model_resources(bad_epilogue, h200, DataType::kNvfp4), Error);
  EXPECT_THROW(model_resources(cutlass(Family::kCutlassSm120, 0, 0, -1216, Epilogue::kFinalize, false), pro,
                               DataType::kNvfp4),
               Error);
  EXPECT_THROW(model_resources(cutlass(Family::kCutlassSm120, -128, -32, -64, Epilogue::kFinalize, false), pro,
                               DataType::kNvfp4),
               Error);
  // A one-stage pipeline is accepted as a tactic but never fits, and the reason says why.
  Tactic one_stage = gemv;
  one_stage.family = Family::kW4a16Fused;
  one_stage.tile_rows = 128;
  one_stage.stages = 1;
  const ResourceReport r = model_resources(one_stage, h200, DataType::kNvfp4, {257, 1, 6144, 9});
  EXPECT_FALSE(r.fits);
  EXPECT_NE(r.reason.find("at least 2 stages"), std::string::npos) << r.reason;
  EXPECT_EQ(r.reason.find("by -"), std::string::npos) << r.reason;
}

}  // namespace
}  // namespace fp4moe
