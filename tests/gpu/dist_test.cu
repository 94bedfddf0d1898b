// The multi-GPU layers on two GPUs (skipped with fewer), against the whole layer on one GPU and
// the float64 reference.
//   Tensor parallel: each GPU runs the layer on its half of every expert's intermediate columns,
//   an NCCL all-reduce sums the outputs (equal within the all-reduce's bf16 rounding).
//   Expert parallel: each GPU holds half the experts and its own tokens; rows travel to their
//   experts and back by NCCL send/recv (bit for bit: checked with the experts bypassed), and
//   the combine is deterministic (repeat runs bitwise equal).
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "dist/ep_layer.h"
#include "dist/nccl_api.h"
#include "fp4moe/layer.h"
#include "fp4moe/sharding.h"
#include "fp4moe/synthetic.h"
#include "gpu_test_util.h"

namespace fp4moe {
namespace {

// The layer every test here shards: sizes that are not multiples of the tiles, a shared expert.
MoeWeights dist_test_weights(uint64_t seed) {
  MoeConfig c;
  c.name = "dist-test";
  c.hidden = 272;
  c.intermediate = 288;
  c.num_experts = 16;
  c.routing.top_k = 4;
  c.shared_intermediate = 288;
  SyntheticOptions so;
  so.seed = seed;
  so.init = WeightInit::kQuantizedGaussian;
  return make_synthetic_moe(c, so);
}

// The experts bypassed (forward's last argument false): the rows a rank sends are its own
// tokens' hidden rows, each top_k times, and every bit of them comes home. The bypass runs twice,
// the second time with every row buffer on the way poisoned first (sent, received, the experts'
// outputs, returned), so that a row never sent, received or returned in that run fails (a first
// run on fresh buffers could agree on what nobody wrote). Every rank of the communicator calls
// it, in step (the forward is collective; the poison lands before either rank's second run).
void expect_rows_travel_bit_exactly(EpMoeLayer& ep, const uint16_t* hidden, const float* logits, int64_t mine,
                                    uint16_t* out, cudaStream_t s, const std::vector<uint16_t>& my_rows, int64_t H,
                                    int k, const std::string& where) {
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      const size_t sent = static_cast<size_t>(ep.sent_row_count() * H) * sizeof(uint16_t);
      const size_t received = static_cast<size_t>(ep.received_row_count() * H) * sizeof(uint16_t);
      for (const auto& [rows, bytes] : {std::pair{ep.sent_rows(), sent}, std::pair{ep.returned_rows(), sent},
                                        std::pair{ep.received_rows(), received}, std::pair{ep.expert_outputs(), received}})
        if (bytes) FP4MOE_CUDA_CHECK(cudaMemset(const_cast<uint16_t*>(rows), 0xFF, bytes));
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    }
    ep.forward(hidden, logits, mine, out, s, nullptr, false);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  ASSERT_EQ(ep.sent_row_count(), mine * k) << where;
  const int64_t n = ep.sent_row_count() * H;
  const std::vector<uint16_t> sent = test::to_host(ep.sent_rows(), n);
  EXPECT_EQ(sent, test::to_host(ep.returned_rows(), n)) << where << ": rows came back changed";
  std::map<std::vector<uint16_t>, int64_t> want, got;
  for (int64_t t = 0; t < mine; ++t) want[std::vector<uint16_t>(my_rows.begin() + t * H, my_rows.begin() + (t + 1) * H)] += k;
  for (int64_t i = 0; i < ep.sent_row_count(); ++i) ++got[std::vector<uint16_t>(sent.begin() + i * H, sent.begin() + (i + 1) * H)];
  EXPECT_TRUE(got == want) << where << ": the rows sent are not the rank's token rows, each " << k << " times";
}

TEST(TensorParallel, TwoGpusMatchOneGpuAndTheReference) {
  FP4MOE_REQUIRE_GPU();
  const CudaEnvironment env = query_cuda_environment();
  if (env.devices.size() < 2) GTEST_SKIP() << "needs 2 GPUs, has " << env.devices.size();
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const NcclApi& nccl = NcclApi::get();
  const MoeWeights full = dist_test_weights(21);
  const MoeConfig& c = full.config;
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
    const test::Comparison vs_one = test::compare(test::bf16_to_double(got[0]), test::bf16_to_double(one.out), c.hidden);
    const std::vector<double> ref = moe_reference(full, hidden, T, one.routing);
    const test::Comparison vs_ref = test::compare(test::bf16_to_double(got[0]), ref, c.hidden);
    std::printf("TP 2, T=%lld: rel error vs one GPU %.3e, vs float64 reference %.3e (one GPU vs reference %.3e)\n",
                static_cast<long long>(T), vs_one.rel_frobenius, vs_ref.rel_frobenius,
                test::compare(test::bf16_to_double(one.out), ref).rel_frobenius);
    EXPECT_TRUE(test::within_tolerance(vs_one)) << "T = " << T << " against one GPU";
    EXPECT_TRUE(test::within_tolerance(vs_ref)) << "T = " << T << " against the reference";
  }
  for (int r = 0; r < P; ++r) {
    FP4MOE_CUDA_CHECK(cudaSetDevice(r));
    cudaStreamDestroy(streams[r]);
    nccl.comm_destroy(comms[r]);
  }
  FP4MOE_CUDA_CHECK(cudaSetDevice(0));
}

// The expert-parallel path on one GPU (a world of one: every expert local, NCCL send/recv to
// itself): routing, gather, exchange, one-hot expert layer, return and combine against the
// single-GPU layer. Runs wherever one GPU is.
TEST(ExpertParallel, OneRankMatchesTheLayer) {
  FP4MOE_REQUIRE_GPU();
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const NcclApi& nccl = NcclApi::get();
  const MoeWeights full = dist_test_weights(29);
  const MoeConfig& c = full.config;
  FP4MOE_CUDA_CHECK(cudaSetDevice(0));
  const int dev = 0;
  ncclComm_t comm;
  FP4MOE_NCCL_CHECK(nccl.comm_init_all(&comm, 1, &dev));
  EpMoeLayer ep(full, {ShardMode::kExpert, 0, 1}, comm);
  // A router its routing kernel cannot run (more slots than a warp has lanes) is refused when the
  // layer is made, on every rank: refused in forward() only where a rank has tokens, it left the
  // others waiting in the first collective.
  {
    MoeConfig wide = c;
    wide.num_experts = 64;
    wide.routing.top_k = 40;
    SyntheticOptions so;
    so.init = WeightInit::kRandomCodes;
    EXPECT_TRUE(test::throws_error_naming([&] { EpMoeLayer(make_synthetic_moe(wide, so), {ShardMode::kExpert, 0, 1}, comm); },
                                          "GPU routing: top_k 40 out of"));
  }
  // A shard that is not the communicator's (its size sizes the gathered counts).
  EXPECT_TRUE(test::throws_error_naming([&] { EpMoeLayer(full, {ShardMode::kExpert, 0, 2}, comm); },
                                        "the shard is rank 0 of 2, the communicator's rank 0 of 1"));
  LayerOptions lo;
  lo.use_tuning_cache = false;
  const std::unique_ptr<GpuMoeLayer> whole = GpuMoeLayer::create(full, lo);
  cudaStream_t s;
  FP4MOE_CUDA_CHECK(cudaStreamCreate(&s));
  {  // host memory: refused by name after the count exchange (which a refusing rank still joins)
    std::vector<uint4> host_rows(5 * c.hidden / 8);
    const DeviceBuffer dl = test::to_device(make_router_logits(5, c.num_experts, 7));
    DeviceBuffer dout(5 * c.hidden * 2);
    EXPECT_TRUE(test::throws_error_naming(
        [&] { ep.forward(reinterpret_cast<uint16_t*>(host_rows.data()), dl.get<float>(), 5, dout.get<uint16_t>(), s); },
        "EP forward: hidden is not CUDA memory"));
  }
  for (int64_t T : {5, 300}) {
    const std::vector<float> hidden = make_hidden_states(T, c.hidden, 500 + T);
    const std::vector<float> logits = make_router_logits(T, c.num_experts, 600 + T);
    const DeviceBuffer dh = test::to_device(test::to_bf16_bits(hidden)), dl = test::to_device(logits);
    DeviceBuffer dout(T * c.hidden * 2);
    expect_rows_travel_bit_exactly(ep, dh.get<uint16_t>(), dl.get<float>(), T, dout.get<uint16_t>(), s,
                                   test::to_bf16_bits(hidden), c.hidden, c.routing.top_k, "T = " + std::to_string(T));
    EXPECT_EQ(ep.received_row_count(), T * c.routing.top_k);
    test::poison(dout);
    ep.forward(dh.get<uint16_t>(), dl.get<float>(), T, dout.get<uint16_t>(), s);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<uint16_t> got = test::to_host<uint16_t>(dout, T * c.hidden);
    test::poison(dout);
    ep.forward(dh.get<uint16_t>(), dl.get<float>(), T, dout.get<uint16_t>(), s);
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
    EXPECT_EQ(test::to_host<uint16_t>(dout, T * c.hidden), got) << "T = " << T << ": repeat runs differ";
    const GpuLayerRun one = run_gpu_layer(*whole, hidden, logits, T, 0);
    const test::Comparison vs_one = test::compare(test::bf16_to_double(got), test::bf16_to_double(one.out), c.hidden);
    const test::Comparison vs_ref = test::compare(test::bf16_to_double(got), moe_reference(full, hidden, T, one.routing), c.hidden);
    std::printf("EP 1, T=%lld: rel error vs the layer %.3e, vs float64 reference %.3e\n", static_cast<long long>(T),
                vs_one.rel_frobenius, vs_ref.rel_frobenius);
    EXPECT_TRUE(test::within_tolerance(vs_one)) << "T = " << T << " against one GPU";
    EXPECT_TRUE(test::within_tolerance(vs_ref)) << "T = " << T << " against the reference";
  }
  cudaStreamDestroy(s);
  nccl.comm_destroy(comm);
}

TEST(ExpertParallel, TwoGpusMatchOneGpuAndMoveRowsBitExactly) {
  FP4MOE_REQUIRE_GPU();
  const CudaEnvironment env = query_cuda_environment();
  if (env.devices.size() < 2) GTEST_SKIP() << "needs 2 GPUs, has " << env.devices.size();
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const NcclApi& nccl = NcclApi::get();
  const MoeWeights full = dist_test_weights(23);
  const MoeConfig& c = full.config;
  constexpr int P = 2;
  const int devs[P] = {0, 1};
  ncclComm_t comms[P];
  FP4MOE_NCCL_CHECK(nccl.comm_init_all(comms, P, devs));
  // Token counts per rank: decode-sized, prefill-sized, and a rank without tokens.
  const int64_t cases[][P] = {{5, 3}, {300, 260}, {4, 0}};
  constexpr int kCases = 3;
  std::vector<uint16_t> out[kCases][P];
  std::exception_ptr failure[P];
  ::testing::AssertionResult refusals[P] = {::testing::AssertionFailure(), ::testing::AssertionFailure()};
  auto rank_main = [&](int r) {
    try {
      FP4MOE_CUDA_CHECK(cudaSetDevice(r));
      const Shard shard{ShardMode::kExpert, r, P};
      EpMoeLayer ep(shard_weights(full, shard), shard, comms[r]);
      cudaStream_t s;
      FP4MOE_CUDA_CHECK(cudaStreamCreate(&s));
      for (int ci = 0; ci < kCases; ++ci) {
        const int64_t T = cases[ci][0] + cases[ci][1], begin = r == 0 ? 0 : cases[ci][0], mine = cases[ci][r];
        const std::vector<float> hidden = make_hidden_states(T, c.hidden, 300 + T);
        const std::vector<float> logits = make_router_logits(T, c.num_experts, 400 + T);
        const std::vector<uint16_t> hb = test::to_bf16_bits(hidden);
        const DeviceBuffer dh = test::to_device(std::vector<uint16_t>(hb.begin() + begin * c.hidden, hb.begin() + (begin + mine) * c.hidden));
        const DeviceBuffer dl = test::to_device(std::vector<float>(logits.begin() + begin * c.num_experts, logits.begin() + (begin + mine) * c.num_experts));
        DeviceBuffer dout(std::max<int64_t>(1, mine * c.hidden * 2));
        // Rows out and back with the experts bypassed: every bit comes home.
        expect_rows_travel_bit_exactly(ep, dh.get<uint16_t>(), dl.get<float>(), mine, dout.get<uint16_t>(), s,
                                       std::vector<uint16_t>(hb.begin() + begin * c.hidden, hb.begin() + (begin + mine) * c.hidden),
                                       c.hidden, c.routing.top_k, "rank " + std::to_string(r) + " case " + std::to_string(ci));
        // Every rank's slots routed to my experts, from the reference's routing of all T tokens.
        const Routing all = route_reference(c.routing, logits, T, c.num_experts, full.correction_bias);
        const IndexRange experts = ep_experts(c.num_experts, shard);
        const int64_t routed_here = std::count_if(all.ids.begin(), all.ids.end(), [&](int32_t e) {
          return e >= experts.begin && e < experts.end;
        });
        EXPECT_EQ(ep.received_row_count(), routed_here) << "rank " << r << " case " << ci;
        // The layer, twice: the same bits both times.
        test::poison(dout);
        ep.forward(dh.get<uint16_t>(), dl.get<float>(), mine, dout.get<uint16_t>(), s);
        FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
        out[ci][r] = test::to_host<uint16_t>(dout, mine * c.hidden);
        test::poison(dout);
        ep.forward(dh.get<uint16_t>(), dl.get<float>(), mine, dout.get<uint16_t>(), s);
        FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
        EXPECT_EQ(test::to_host<uint16_t>(dout, mine * c.hidden), out[ci][r]) << "rank " << r << " case " << ci;
      }
      // One rank's bad call (rank 1: host memory) is thrown by both ranks, after the count
      // exchange: rank 0 alone went on into the dispatch and waited there for ever. Then both run.
      {
        const int64_t mine = 3;
        const DeviceBuffer dh = test::to_device(test::to_bf16_bits(make_hidden_states(mine, c.hidden, 77)));
        const DeviceBuffer dl = test::to_device(make_router_logits(mine, c.num_experts, 78));
        std::vector<uint4> host_rows(mine * c.hidden / 8);
        DeviceBuffer dout(mine * c.hidden * 2);
        const uint16_t* hidden = r == 1 ? reinterpret_cast<const uint16_t*>(host_rows.data()) : dh.get<uint16_t>();
        refusals[r] = test::throws_error_naming([&] { ep.forward(hidden, dl.get<float>(), mine, dout.get<uint16_t>(), s); },
                                                r == 1 ? "EP forward: hidden is not CUDA memory"
                                                       : "expert parallel: rank 1 refused this call");
        ep.forward(dh.get<uint16_t>(), dl.get<float>(), mine, dout.get<uint16_t>(), s);
        FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
      }
      cudaStreamDestroy(s);
    } catch (...) {
      failure[r] = std::current_exception();
    }
  };
  std::thread ranks[P] = {std::thread(rank_main, 0), std::thread(rank_main, 1)};
  for (auto& t : ranks) t.join();
  for (auto& f : failure)
    if (f) std::rethrow_exception(f);
  for (int r = 0; r < P; ++r) EXPECT_TRUE(refusals[r]) << "rank " << r;
  FP4MOE_CUDA_CHECK(cudaSetDevice(0));
  LayerOptions lo;
  lo.use_tuning_cache = false;
  const std::unique_ptr<GpuMoeLayer> whole = GpuMoeLayer::create(full, lo);
  for (int ci = 0; ci < kCases; ++ci) {
    const int64_t T = cases[ci][0] + cases[ci][1];
    const std::vector<float> hidden = make_hidden_states(T, c.hidden, 300 + T);
    const std::vector<float> logits = make_router_logits(T, c.num_experts, 400 + T);
    const GpuLayerRun one = run_gpu_layer(*whole, hidden, logits, T, 0);
    std::vector<uint16_t> got = out[ci][0];
    got.insert(got.end(), out[ci][1].begin(), out[ci][1].end());
    const test::Comparison vs_one = test::compare(test::bf16_to_double(got), test::bf16_to_double(one.out), c.hidden);
    const test::Comparison vs_ref = test::compare(test::bf16_to_double(got), moe_reference(full, hidden, T, one.routing), c.hidden);
    std::printf("EP 2, T=%lld+%lld: rel error vs one GPU %.3e, vs float64 reference %.3e\n",
                static_cast<long long>(cases[ci][0]), static_cast<long long>(cases[ci][1]), vs_one.rel_frobenius,
                vs_ref.rel_frobenius);
    EXPECT_TRUE(test::within_tolerance(vs_one)) << "case " << ci << " against one GPU";
    EXPECT_TRUE(test::within_tolerance(vs_ref)) << "case " << ci << " against the reference";
  }
  for (int r = 0; r < P; ++r) nccl.comm_destroy(comms[r]);
}

}  // namespace
}  // namespace fp4moe
