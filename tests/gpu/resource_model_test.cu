// Profile (a) of the resource model against what the CUDA runtime says of every compiled
// w4a16_mma kernel: no static shared memory, the dynamic request equal to the model's total,
// and the model's CTAs per SM never below the runtime's (registers can only lower it).
#include <gtest/gtest.h>

#include <algorithm>

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
  for (int experts : {13, 257, 1025}) {
    for (const auto& k : kernels::w4a16_kernels()) {
      ModelOptions opt;
      opt.experts = experts;
      const ResourceReport r = model_resources(k.tactic, gpu, DataType::kNvfp4, opt);
      const auto info = query_compiled_kernel(k.tactic, experts);
      ASSERT_TRUE(info.has_value()) << format_tactic(k.tactic);
      EXPECT_EQ(info->static_smem, 0) << format_tactic(k.tactic);
      EXPECT_EQ(info->dynamic_smem, r.total_bytes) << format_tactic(k.tactic) << " experts " << experts;
      EXPECT_GE(r.ctas_per_sm, info->ctas_per_sm) << format_tactic(k.tactic);
      EXPECT_GT(info->ctas_per_sm, 0) << format_tactic(k.tactic);
      if (experts == 257)
        std::printf("%-44s model %6lld B, %d CTAs/SM | runtime %6lld B, %d CTAs/SM, %d registers\n",
                    format_tactic(k.tactic).c_str(), static_cast<long long>(r.total_bytes), r.ctas_per_sm,
                    static_cast<long long>(info->dynamic_smem + info->static_smem), info->ctas_per_sm,
                    info->registers);
    }
  }
}

}  // namespace
}  // namespace fp4moe
