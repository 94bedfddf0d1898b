// Tensor parallel on two GPUs (skipped with fewer): each GPU runs the layer on its half of every
// expert's intermediate columns, an NCCL all-reduce sums the outputs; the result equals the
// whole layer on one GPU within the all-reduce's bf16 rounding, and the float64 reference.
#include <gtest/gtest.h>

#include <memory>

#include "dist/nccl_api.h"
#include "fp4moe/layer.h"
#include "fp4moe/sharding.h"
#include "fp4moe/synthetic.h"
#include "gpu_test_util.h"

namespace fp4moe {
namespace {

TEST(TensorParallel, TwoGpusMatchOneGpuAndTheReference) {
  FP4MOE_REQUIRE_GPU();
  const CudaEnvironment env = query_cuda_environment();
  if (env.devices.size() < 2) GTEST_SKIP() << "needs 2 GPUs, has " << env.devices.size();
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const NcclApi& nccl = NcclApi::get();
  MoeConfig c;
  c.name = "tp-test";
  c.hidden = 272;  // not a multiple of the tiles
  c.intermediate = 288;
  c.num_experts = 16;
  c.routing.top_k = 4;
  c.shared_intermediate = 288;
  SyntheticOptions so;
  so.seed = 21;
  so.init = WeightInit::kQuantizedGaussian;
  const MoeWeights full = make_synthetic_moe(c, so);
  constexpr int P = 2;
  const int devs[P] = {0, 1};
  ncclComm_t comms[P];
  FP4MOE_NCCL_CHECK(nccl.comm_init_all(comms, P, devs));
  std::unique_ptr<GpuMoeLayer> shard[P];
  cudaStream_t streams[P];
  for (int r = 0; r < P; ++r) {
    LayerOptions lo;
    lo.device = r;
    lo.use_tuning_cache = false;
    FP4MOE_CUDA_CHECK(cudaSetDevice(r));
    shard[r] = GpuMoeLayer::create(shard_weights(full, {ShardMode::kTensor, r, P}), lo);
    FP4MOE_CUDA_CHECK(cudaStreamCreate(&streams[r]));
  }
  FP4MOE_CUDA_CHECK(cudaSetDevice(0));
  LayerOptions lo0;
  lo0.use_tuning_cache = false;
  const std::unique_ptr<GpuMoeLayer> whole = GpuMoeLayer::create(full, lo0);
  for (int64_t T : {5, 300}) {  // the decode family, then the prefill family where it exists
    const std::vector<float> hidden = make_hidden_states(T, c.hidden, 100 + T);
    const std::vector<float> logits = make_router_logits(T, c.num_experts, 200 + T);
    const GpuLayerRun one = run_gpu_layer(*whole, hidden, logits, T, 0);
    const std::vector<uint16_t> hb = test::to_bf16_bits(hidden);
    DeviceBuffer dh[P], dl[P], dout[P];
    for (int r = 0; r < P; ++r) {
      FP4MOE_CUDA_CHECK(cudaSetDevice(r));
      dh[r] = test::to_device(hb);
      dl[r] = test::to_device(logits);
      dout[r] = DeviceBuffer(T * c.hidden * 2);
      test::poison(dout[r]);
      shard[r]->forward(dh[r].get<uint16_t>(), dl[r].get<float>(), T, dout[r].get<uint16_t>(), streams[r]);
    }
    FP4MOE_NCCL_CHECK(nccl.group_start());
    for (int r = 0; r < P; ++r)
      FP4MOE_NCCL_CHECK(nccl.all_reduce(dout[r].get(), dout[r].get(), T * c.hidden, ncclBfloat16, ncclSum,
                                        comms[r], streams[r]));
    FP4MOE_NCCL_CHECK(nccl.group_end());
    std::vector<uint16_t> got[P];
    for (int r = 0; r < P; ++r) {
      FP4MOE_CUDA_CHECK(cudaSetDevice(r));
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(streams[r]));
      got[r] = test::to_host<uint16_t>(dout[r], T * c.hidden);
    }
    EXPECT_EQ(got[0], got[1]) << "T = " << T << ": the ranks' all-reduced outputs differ";
    const test::Comparison vs_one = test::compare(test::bf16_to_double(got[0]), test::bf16_to_double(one.out));
    const std::vector<double> ref = moe_reference(full, hidden, T, one.routing);
    const test::Comparison vs_ref = test::compare(test::bf16_to_double(got[0]), ref);
    std::printf("TP 2, T=%lld: rel error vs one GPU %.3e, vs float64 reference %.3e (one GPU vs reference %.3e)\n",
                static_cast<long long>(T), vs_one.rel_frobenius, vs_ref.rel_frobenius,
                test::compare(test::bf16_to_double(one.out), ref).rel_frobenius);
    EXPECT_EQ(vs_one.non_finite, 0);
    EXPECT_LT(vs_one.rel_frobenius, 1e-2) << "T = " << T;
    EXPECT_LT(vs_ref.rel_frobenius, 1e-2) << "T = " << T;
  }
  for (int r = 0; r < P; ++r) {
    FP4MOE_CUDA_CHECK(cudaSetDevice(r));
    cudaStreamDestroy(streams[r]);
    nccl.comm_destroy(comms[r]);
  }
  FP4MOE_CUDA_CHECK(cudaSetDevice(0));
}

}  // namespace
}  // namespace fp4moe
