// Profile (a) of the resource model against what the CUDA runtime says of every compiled
// w4a16_mma kernel: no static shared memory, the dynamic request equal to the model's total,
// and the model's CTAs per SM never below the runtime's (registers can only lower it).
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "fp4moe/resource_model.h"
#include "gpu_test_util.h"
#include "kernels/gemm/w4a16_registry.h"

namespace fp4moe {
namespace {

TEST(ResourceModelOnGpu, ModelEqualsEveryCompiledKernelsRequest) {
  FP4MOE_REQUIRE_GPU();
  const GpuSpec gpu = query_cuda_environment().devices[0];
  // The model's list of compiled tactics is the registry's.
  std::vector<std::string> listed, compiled;
  for (const Tactic& t : compiled_w4a16_tactics()) listed.push_back(format_tactic(t));
  for (const auto& k : kernels::w4a16_kernels()) compiled.push_back(format_tactic(k.tactic));
  std::sort(listed.begin(), listed.end());
  std::sort(compiled.begin(), compiled.end());
  EXPECT_EQ(listed, compiled);
  // Shapes: the groups (the stream-K families' unit prefix) and, for w4a16_gemv, which stages its
  // batch, the batch, K and slots too (glm5's FC1 and FC2 at 1 and 8 tokens, the odd test shape).
  std::vector<ModelOptions> shapes;
  for (int experts : {13, 257, 1025}) shapes.push_back(ModelOptions{experts});
  for (const auto& [tokens, k, slots] : {std::tuple{1, 6144, 9}, std::tuple{8, 6144, 9}, std::tuple{8, 2048, 9},
                                         std::tuple{3, 400, 4}, std::tuple{8, 256, 9}})
    shapes.push_back(ModelOptions{257, tokens, k, slots});
  for (const ModelOptions& opt : shapes) {
    for (const auto& k : kernels::w4a16_kernels()) {
      const ResourceReport r = model_resources(k.tactic, gpu, DataType::kNvfp4, opt);
      if (!r.fits) {
        // Only the small-batch and fused families' requests depend on the shape: they route 256
        // experts in-kernel at most, and glm5's FC2 at 8 tokens stages 72 act rows of 4 KB
        // (296 KB) in the small-batch family.
        EXPECT_TRUE(k.tactic.family == Family::kW4a16Gemv ||
                    (k.tactic.family == Family::kW4a16Fused && opt.experts > 257))
            << format_tactic(k.tactic) << ": " << r.reason;
        continue;
      }
      const auto info = query_compiled_kernel(k.tactic, opt);
      ASSERT_TRUE(info.has_value()) << format_tactic(k.tactic);
      EXPECT_EQ(info->static_smem, 0) << format_tactic(k.tactic);
      EXPECT_EQ(info->dynamic_smem, r.total_bytes)
          << format_tactic(k.tactic) << " experts " << opt.experts << " T " << opt.tokens << " K " << opt.k;
      EXPECT_GE(r.ctas_per_sm, info->ctas_per_sm) << format_tactic(k.tactic);
      EXPECT_GT(info->ctas_per_sm, 0) << format_tactic(k.tactic);
      if (opt.experts == 257 && (k.tactic.family != Family::kW4a16Gemv || opt.tokens == 8))
        std::printf("%-44s model %6lld B, %d CTAs/SM | runtime %6lld B, %d CTAs/SM, %d registers (T %d, K %d)\n",
                    format_tactic(k.tactic).c_str(), static_cast<long long>(r.total_bytes), r.ctas_per_sm,
                    static_cast<long long>(info->dynamic_smem + info->static_smem), info->ctas_per_sm,
                    info->registers, opt.tokens, opt.k);
    }
  }
}

}  // namespace
}  // namespace fp4moe
