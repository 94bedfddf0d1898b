// Cross-check of the resource model's CUTLASS profile (b) against the real types: builds the
// fused-MoE grouped GEMM types the way TensorRT-LLM's moe_gemm_tma_ws_launcher.inl does for
// NVFP4 x NVFP4 -> bf16 (host compilation only; no kernel is launched or instantiated) and
// compares the stage count and sizeof(GemmKernel::SharedStorage) with model_resources().
// Built for one architecture per binary: -DFP4MOE_CROSSCHECK_SM=120 (sm_120a) or 100 (sm_100a).
#include <gtest/gtest.h>

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass_extensions/epilogue/fusion/sm90_visitor_scatter.hpp"
#include "fp4moe/hw.h"
#include "fp4moe/resource_model.h"

namespace {

using namespace cute;

// The launcher's recipe, reduced to what decides the shared memory. Arch: Sm120 or Sm100.
// M, N, K: the MMA tile in elements (on sm_100, M = 256 is the 2-SM tile of CTA M 128).
template <class Arch, int M, int N, int K, bool kFinalize, bool kSwap>
struct FusedMoeGemm {
  static constexpr bool kSm120 = Arch::kMinComputeCapability == 120;
  static constexpr bool k2Sm = !kSm120 && M == 256;
  using Cluster = Shape<Int<k2Sm ? 2 : 1>, _1, _1>;
  using Tile = Shape<Int<M>, Int<N>, Int<K>>;
  using E2m1 = cutlass::float_e2m1_t;
  using Sf = cutlass::float_ue4m3_t;
  using Bf16 = cutlass::bfloat16_t;
  using BlockScaled = std::conditional_t<kSm120, cutlass::nv_float4_t<E2m1>, cute::tuple<E2m1, Sf>>;
  using LayoutCD = std::conditional_t<kSwap, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  // sm_120: the epilogue is built with a bf16 C (never read); sm_100: C is void.
  using EpiC = std::conditional_t<kSm120, Bf16, void>;
  using EpiSchedule = std::conditional_t<kSm120, cutlass::epilogue::TmaWarpSpecialized,
                                         std::conditional_t<k2Sm, cutlass::epilogue::PtrArrayTmaWarpSpecialized2Sm,
                                                            cutlass::epilogue::PtrArrayTmaWarpSpecialized1Sm>>;
  using EpiTile = std::conditional_t<!kSm120 && N == 256, Shape<_128, _64>, cutlass::epilogue::collective::EpilogueTileAuto>;
  using Scatter = std::conditional_t<
      kSwap, cutlass::epilogue::fusion::ScaledAccPerRowBiasPerColScaleScatter<LayoutCD, Bf16, float, Bf16, float>,
      cutlass::epilogue::fusion::ScaledAccPerColBiasPerRowScaleScatter<LayoutCD, Bf16, float, Bf16, float>>;
  template <bool F, class = void>
  struct Epi {
    using type = typename cutlass::epilogue::collective::CollectiveBuilder<
        Arch, cutlass::arch::OpClassBlockScaledTensorOp, Tile, Cluster, EpiTile, float, float, EpiC, LayoutCD*, 32,
        Bf16, LayoutCD*, 8, EpiSchedule>::CollectiveOp;
  };
  template <class D>
  struct Epi<true, D> {
    using type = typename cutlass::epilogue::collective::CollectiveBuilder<
        Arch, cutlass::arch::OpClassBlockScaledTensorOp, Tile, Cluster, EpiTile, float, float, EpiC, LayoutCD*, 32,
        void, LayoutCD*, 8, EpiSchedule, Scatter>::CollectiveOp;
  };
  using Epilogue = typename Epi<kFinalize>::type;
  using MainSchedule = std::conditional_t<kSm120, cutlass::gemm::collective::KernelScheduleAuto,
                                          std::conditional_t<k2Sm, cutlass::gemm::KernelPtrArrayTmaWarpSpecialized2SmNvf4Sm100,
                                                             cutlass::gemm::KernelPtrArrayTmaWarpSpecialized1SmNvf4Sm100>>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      Arch, cutlass::arch::OpClassBlockScaledTensorOp, BlockScaled, cutlass::layout::RowMajor*, 32, BlockScaled,
      cutlass::layout::ColumnMajor*, 32, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<
      cutlass::gemm::GroupProblemShape<Shape<int64_t, int64_t, int64_t>>, Mainloop, Epilogue, void, void>;
  static constexpr int kStages = Mainloop::DispatchPolicy::Stages;
  static constexpr int64_t kBytes = sizeof(typename Kernel::SharedStorage);
};

template <class G>
void expect_model_matches(fp4moe::Family family, int m, int n, int k, bool finalize, bool swap) {
  const fp4moe::GpuSpec gpu = *fp4moe::find_known_gpu(family == fp4moe::Family::kCutlassSm120 ? "rtx-pro-6000" : "b200");
  const fp4moe::Tactic t{family, m, n, k, 0, 0, 1, finalize ? fp4moe::Epilogue::kFinalize : fp4moe::Epilogue::kNone, swap};
  const fp4moe::ResourceReport r = fp4moe::model_resources(t, gpu, fp4moe::DataType::kNvfp4);
  EXPECT_EQ(r.stages, G::kStages) << fp4moe::format_tactic(t);
  EXPECT_EQ(r.total_bytes, G::kBytes) << fp4moe::format_tactic(t);
  std::printf("%-56s CUTLASS: %2d stages, %6lld B | model: %2d stages, %6lld B\n", fp4moe::format_tactic(t).c_str(),
              G::kStages, static_cast<long long>(G::kBytes), r.stages, static_cast<long long>(r.total_bytes));
}

#define FP4MOE_XCHECK(ARCH, FAM, M, N, K, FIN, SWAP) \
  expect_model_matches<FusedMoeGemm<ARCH, M, N, K, FIN, SWAP>>(FAM, M, N, K, FIN, SWAP)

#if FP4MOE_CROSSCHECK_SM == 120
TEST(CutlassCrossCheck, Sm120FusedMoeTiles) {
  using A = cutlass::arch::Sm120;
  constexpr auto F = fp4moe::Family::kCutlassSm120;
  FP4MOE_XCHECK(A, F, 128, 128, 128, true, false);
  FP4MOE_XCHECK(A, F, 128, 128, 128, false, false);
  FP4MOE_XCHECK(A, F, 128, 128, 256, true, false);
  FP4MOE_XCHECK(A, F, 128, 256, 128, true, false);
  FP4MOE_XCHECK(A, F, 128, 256, 128, true, true);
  FP4MOE_XCHECK(A, F, 128, 256, 128, false, false);
  FP4MOE_XCHECK(A, F, 256, 128, 128, true, false);
  FP4MOE_XCHECK(A, F, 256, 128, 128, false, true);
  FP4MOE_XCHECK(A, F, 128, 64, 128, false, false);
  FP4MOE_XCHECK(A, F, 128, 32, 256, true, true);
}
#else
TEST(CutlassCrossCheck, Sm100FusedMoeTiles) {
  using A = cutlass::arch::Sm100;
  constexpr auto F = fp4moe::Family::kCutlassSm100;
  FP4MOE_XCHECK(A, F, 128, 64, 256, true, false);
  FP4MOE_XCHECK(A, F, 128, 128, 256, false, false);
  FP4MOE_XCHECK(A, F, 128, 128, 256, true, true);
  FP4MOE_XCHECK(A, F, 128, 256, 256, true, false);
  FP4MOE_XCHECK(A, F, 256, 128, 256, true, false);
  FP4MOE_XCHECK(A, F, 128, 128, 128, false, false);
}
#endif

}  // namespace
