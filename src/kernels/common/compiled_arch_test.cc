// The architecture limits the kernels' launch bounds are compiled with (compiled_arch.cuh),
// against the GPU table the resource model reads (hw/gpu_table.cc): the same shared memory per
// SM and per-CTA reservation for every GPU listed, and for every compiled decode tile the same
// answer to "are two CTAs resident?" - the launch bounds ask registers for two exactly where
// the model (`fp4moe tactics`) reports two CTAs an SM. Before the two agreed, the 8-warp tiles
// were compiled for two CTAs on sm_120a, where the model said one, and spilled.
#include "kernels/common/compiled_arch.cuh"

#include <gtest/gtest.h>

#include "fp4moe/hw.h"
#include "fp4moe/resource_model.h"
#include "kernels/gemm/mma_shapes.h"

namespace fp4moe::kernels {
namespace {

TEST(CompiledArch, SharedMemoryPerSmIsTheGpuTables) {
  ASSERT_FALSE(known_gpus().empty());
  for (const GpuSpec& g : known_gpus()) {
    EXPECT_EQ(arch_smem_per_sm(g.sm * 10), g.smem_per_sm) << g.name;
    EXPECT_EQ(kSmemReservedPerCta, g.smem_reserved_per_block) << g.name;
  }
  // The host pass's answer (launch bounds are device-pass only) is Hopper's.
  EXPECT_EQ(compiled_arch_smem_per_sm(), arch_smem_per_sm(900));
}

TEST(CompiledArch, TwoCtaLaunchBoundsWhereTheModelSeesTwoCtas) {
  ModelOptions one_group;
  one_group.experts = 1;  // the request W4a16Traits::kMinCtasPerSm is computed from
  int two_somewhere = 0, one_somewhere = 0;
  for (const GpuSpec& g : known_gpus()) {
    for (Epilogue ep : {Epilogue::kSwiglu, Epilogue::kFinalize}) {
      for (const MmaShape& m : kMmaShapes) {
        const ResourceReport r = model_resources(shape_tactic(m, ep), g, DataType::kNvfp4, one_group);
        ASSERT_TRUE(r.supported) << r.reason;
        const bool bounds_ask_two =
            two_ctas_fit(static_cast<int>(r.total_bytes), arch_smem_per_sm(g.sm * 10));
        EXPECT_EQ(bounds_ask_two, r.ctas_per_sm >= 2)
            << format_tactic(r.tactic) << " on " << g.name << ": " << r.total_bytes << " B, model "
            << r.ctas_per_sm << " CTAs an SM";
        (bounds_ask_two ? two_somewhere : one_somewhere)++;
      }
    }
  }
  // Both answers occur: the comparison above is not one-sided.
  EXPECT_GT(two_somewhere, 0);
  EXPECT_GT(one_somewhere, 0);
}

}  // namespace
}  // namespace fp4moe::kernels
