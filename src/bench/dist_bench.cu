// The multi-GPU benchmark (see dist_bench.h).
#include "bench/dist_bench.h"

#include <cuda_runtime.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "common/bf16_compare.h"
#include "dist/ep_layer.h"
#include "dist/nccl_api.h"
#include "fp4moe/bf16.h"
#include "fp4moe/error.h"
#include "fp4moe/hw.h"
#include "fp4moe/layer.h"
#include "fp4moe/sharding.h"
#include "fp4moe/synthetic.h"
#include "kernels/common/cuda_check.h"
#include "runtime/device_buffer.h"
#include "runtime/event_timing.h"
#include "runtime/l2_flush.h"

namespace fp4moe {
namespace {

// One page shared by the ranks (mmap before fork): the NCCL id rank 0 makes, and a failure
// flag so that a rank waiting for the id gives up when another has failed.
struct SharedPage {
  std::atomic<int> id_ready;
  std::atomic<int> failed;
  ncclUniqueId id;
  int devices;            // the probe's count of GPUs
  char probe_error[256];  // and why there are none
};

// Counts the GPUs in a child process, so that the parent never initializes CUDA (its ranks are
// forked from it, and CUDA does not survive a fork).
void probe_devices(SharedPage* page) {
  const pid_t pid = fork();
  FP4MOE_CHECK(pid >= 0, "multi-GPU bench: fork failed");
  if (pid == 0) {
    // The same query, and so the same words, as every single-GPU command's ("no CUDA driver").
    const CudaEnvironment env = query_cuda_environment();
    page->devices = static_cast<int>(env.devices.size());
    if (!env.error.empty()) std::snprintf(page->probe_error, sizeof(page->probe_error), "%s", env.error.c_str());
    _exit(0);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  // A probe that crashed counted nothing: say so, not "this machine has 0 GPUs" alone.
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && page->probe_error[0] == 0)
    std::snprintf(page->probe_error, sizeof(page->probe_error), "the probe process %s %d",
                  WIFSIGNALED(st) ? "was killed by signal" : "exited with", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

void run_tp_rank(const DistBenchOptions& o, int rank, ncclComm_t comm);
void run_ep_rank(const DistBenchOptions& o, int rank, ncclComm_t comm);

void run_rank(const DistBenchOptions& o, int rank, SharedPage* page) {
  const NcclApi& nccl = NcclApi::get();
  FP4MOE_CUDA_CHECK(cudaSetDevice(rank));
  if (rank == 0) {
    FP4MOE_NCCL_CHECK(nccl.get_unique_id(&page->id));
    page->id_ready.store(1);
  } else {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!page->id_ready.load()) {
      FP4MOE_CHECK(!page->failed.load(), "another rank failed before NCCL started");
      FP4MOE_CHECK(std::chrono::steady_clock::now() < until, "no NCCL id from rank 0 within 120 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ncclComm_t comm;
  FP4MOE_NCCL_CHECK(nccl.comm_init_rank(&comm, o.world, page->id, rank));
  if (o.mode == ShardMode::kTensor)
    run_tp_rank(o, rank, comm);
  else
    run_ep_rank(o, rank, comm);
  FP4MOE_NCCL_CHECK(nccl.comm_destroy(comm));
}

void run_tp_rank(const DistBenchOptions& o, int rank, ncclComm_t comm) {
  const NcclApi& nccl = NcclApi::get();
  const MoeConfig& cfg = o.config;
  const Shard shard{ShardMode::kTensor, rank, o.world};
  validate_shard(cfg, shard);
  SyntheticOptions so;
  so.seed = o.seed;
  LayerOptions lo;
  lo.device = rank;
  lo.use_tuning_cache = false;  // the documented heuristic on every rank: the same plan as --no-cache
  std::unique_ptr<GpuMoeLayer> layer, single;
  {
    const MoeWeights full = make_synthetic_moe(cfg, so);
    layer = GpuMoeLayer::create(shard_weights(full, shard), lo);
    if (rank == 0 && o.compare_single_gpu) single = GpuMoeLayer::create(full, lo);
  }
  const int64_t max_t = *std::max_element(o.tokens.begin(), o.tokens.end());
  layer->reserve(max_t);
  if (single) single->reserve(max_t);
  const GpuSpec gpu = query_cuda_environment().devices.at(rank);
  L2Flusher flusher(gpu.l2_bytes);
  const OwnedStream s;
  cudaEvent_t ev[6];
  for (auto& e : ev) FP4MOE_CUDA_CHECK(cudaEventCreate(&e));
  void* const stage_events[4] = {ev[0], ev[1], ev[2], ev[3]};

  if (rank == 0) {
    std::printf("tensor parallel %d x %s (%s), I = %lld per rank; %s; heuristic plan, plain launches%s\n", o.world,
                gpu.name.c_str(), cfg.name.c_str(), static_cast<long long>(cfg.intermediate / o.world),
                "bf16 all-reduce (NCCL, NVLS off)", o.cold_l2 ? ", cold L2" : "");
    std::printf("%6s | %9s %9s %9s %9s | %10s %10s | %10s %6s | %10s %7s | %9s\n", "T", "route us", "FC1 us",
                "FC2 us", "GEMMs us", "allred us", "alone us", "TP us", "comm%", "1 GPU us", "speedup",
                "rel err");
    std::fflush(stdout);
  }
  for (int64_t T : o.tokens) {
    const std::vector<float> hidden = make_hidden_states(T, cfg.hidden, o.seed + T);
    const std::vector<float> logits = make_router_logits(T, cfg.num_experts, o.seed + T);
    std::vector<uint16_t> hb(hidden.size());
    for (size_t i = 0; i < hidden.size(); ++i) hb[i] = Bf16::from_float(hidden[i]).bits;
    const int64_t n = T * cfg.hidden;
    DeviceBuffer dh(hb.size() * 2), dl(logits.size() * 4), dout(n * 2), dsingle(n * 2);
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(dh.get(), hb.data(), hb.size() * 2, cudaMemcpyHostToDevice, s));
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(dl.get(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice, s));
    auto tp_forward = [&](bool with_events) {
      if (with_events)
        layer->forward_with_events(dh.get<uint16_t>(), dl.get<float>(), T, dout.get<uint16_t>(), s, stage_events);
      else
        layer->forward(dh.get<uint16_t>(), dl.get<float>(), T, dout.get<uint16_t>(), s);
      FP4MOE_NCCL_CHECK(nccl.all_reduce(dout.get(), dout.get(), n, ncclBfloat16, ncclSum, comm, s));
    };
    // The checked run (outputs poisoned first).
    FP4MOE_CUDA_CHECK(cudaMemsetAsync(dout.get(), 0xFF, dout.bytes(), s));
    tp_forward(false);
    synchronize_with_nccl(s, comm);
    // Timed runs: events before the routing, after it, after FC1, after FC2, after the all-reduce.
    std::vector<double> route, fc1, fc2, gemms, allred, total;
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      if (o.cold_l2) flusher.flush(s);
      tp_forward(true);
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[4], s));
      synchronize_with_nccl(s, comm);  // (the event is the last work on s)
      if (i < o.warmup) continue;
      float ms[4];
      for (int k = 0; k < 4; ++k) FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms[k], ev[k], ev[k + 1]));
      route.push_back(ms[0] * 1e3);
      fc1.push_back(ms[1] * 1e3);
      fc2.push_back(ms[2] * 1e3);
      gemms.push_back((ms[0] + ms[1] + ms[2]) * 1e3);
      allred.push_back(ms[3] * 1e3);
      total.push_back((ms[0] + ms[1] + ms[2] + ms[3]) * 1e3);
    }
    // The all-reduce alone: the ranks line up on a first one, the second is timed.
    std::vector<double> alone;
    for (int i = 0; i < o.iters; ++i) {
      FP4MOE_NCCL_CHECK(nccl.all_reduce(dsingle.get(), dsingle.get(), n, ncclBfloat16, ncclSum, comm, s));
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[4], s));
      FP4MOE_NCCL_CHECK(nccl.all_reduce(dsingle.get(), dsingle.get(), n, ncclBfloat16, ncclSum, comm, s));
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[5], s));
      synchronize_with_nccl(s, comm);  // (the event is the last work on s)
      float ms;
      FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[4], ev[5]));
      alone.push_back(ms * 1e3);
    }
    if (rank != 0) continue;
    // Rank 0: the TP output against the whole layer on one GPU, and the whole layer's time.
    std::vector<uint16_t> tp_out(n), one(n);
    FP4MOE_CUDA_CHECK(cudaMemcpy(tp_out.data(), dout.get(), n * 2, cudaMemcpyDeviceToHost));
    double single_us = 0, err = NAN;
    if (single) {
      FP4MOE_CUDA_CHECK(cudaMemsetAsync(dsingle.get(), 0xFF, dsingle.bytes(), s));
      single->forward(dh.get<uint16_t>(), dl.get<float>(), T, dsingle.get<uint16_t>(), s);
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
      FP4MOE_CUDA_CHECK(cudaMemcpy(one.data(), dsingle.get(), n * 2, cudaMemcpyDeviceToHost));
      err = bf16_rel_error(tp_out, one);
      single_us = 1e6 * median_event_time(o.warmup, o.iters, s,
                                          [&] { single->forward(dh.get<uint16_t>(), dl.get<float>(), T,
                                                                dsingle.get<uint16_t>(), s); },
                                          [&] { if (o.cold_l2) flusher.flush(s); });
    }
    const double tp_us = median(total), ar_us = median(allred);
    std::printf("%6lld | %9.1f %9.1f %9.1f %9.1f | %10.1f %10.1f | %10.1f %5.1f%% | %10.1f %6.2fx | %9.2e\n",
                static_cast<long long>(T), median(route), median(fc1), median(fc2), median(gemms), ar_us,
                median(alone), tp_us, 100.0 * ar_us / tp_us, single_us, single_us > 0 ? single_us / tp_us : 0.0,
                err);
    std::fflush(stdout);
    FP4MOE_CHECK(std::isfinite(err) || !single, "T = ", T, ": the tensor-parallel output holds NaN or Inf");
    FP4MOE_CHECK(!single || err < 1e-2, "T = ", T, ": the tensor-parallel output differs from one GPU's by ", err,
                 " (relative Frobenius), more than 1e-2");
  }
  for (auto& e : ev) cudaEventDestroy(e);
}

void run_ep_rank(const DistBenchOptions& o, int rank, ncclComm_t comm) {
  const NcclApi& nccl = NcclApi::get();
  const MoeConfig& cfg = o.config;
  const Shard shard{ShardMode::kExpert, rank, o.world};
  SyntheticOptions so;
  so.seed = o.seed;
  LayerOptions lo;
  lo.device = rank;
  lo.use_tuning_cache = false;
  std::unique_ptr<EpMoeLayer> ep;
  std::unique_ptr<GpuMoeLayer> single;
  {
    const MoeWeights full = make_synthetic_moe(cfg, so);
    ep = std::make_unique<EpMoeLayer>(shard_weights(full, shard), shard, comm);
    if (o.compare_single_gpu) single = GpuMoeLayer::create(full, lo);
  }
  const GpuSpec gpu = query_cuda_environment().devices.at(rank);
  L2Flusher flusher(gpu.l2_bytes);
  const OwnedStream s;
  cudaEvent_t ev[7];
  for (auto& e : ev) FP4MOE_CUDA_CHECK(cudaEventCreate(&e));
  DeviceBuffer err_sums(16);
  if (rank == 0) {
    std::printf("expert parallel %d x %s (%s), %d experts and 1/%d of the tokens per rank; NCCL send/recv (NVLS off); "
                "heuristic plans, plain launches%s\n",
                o.world, gpu.name.c_str(), cfg.name.c_str(), cfg.num_experts / o.world, o.world,
                o.cold_l2 ? ", cold L2" : "");
    std::printf("%6s | %8s %9s %9s %9s %9s %9s | %9s %6s | %10s %7s | %9s\n", "T", "route us", "counts us",
                "dispatch", "experts", "return", "combine", "EP us", "comm%", "1 GPU us", "speedup", "rel err");
    std::fflush(stdout);
  }
  for (int64_t T : o.tokens) {
    // The batch's tokens, split evenly (the first T % P ranks take one more).
    const int64_t base = T / o.world, extra = T % o.world;
    const int64_t begin = rank * base + std::min<int64_t>(rank, extra), mine = base + (rank < extra ? 1 : 0);
    const std::vector<float> hidden = make_hidden_states(T, cfg.hidden, o.seed + T);
    const std::vector<float> logits = make_router_logits(T, cfg.num_experts, o.seed + T);
    std::vector<uint16_t> hb(hidden.size());
    for (size_t i = 0; i < hidden.size(); ++i) hb[i] = Bf16::from_float(hidden[i]).bits;
    const int64_t H = cfg.hidden, E = cfg.num_experts;
    DeviceBuffer dh(std::max<int64_t>(1, T * H * 2)), dl(std::max<int64_t>(1, T * E * 4));
    DeviceBuffer dout(std::max<int64_t>(1, mine * H * 2)), done(std::max<int64_t>(1, T * H * 2));
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(dh.get(), hb.data(), hb.size() * 2, cudaMemcpyHostToDevice, s));
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(dl.get(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice, s));
    const uint16_t* my_hidden = dh.get<uint16_t>() + begin * H;
    const float* my_logits = dl.get<float>() + begin * E;
    // The checked run (output poisoned first).
    FP4MOE_CUDA_CHECK(cudaMemsetAsync(dout.get(), 0xFF, dout.bytes(), s));
    ep->forward(my_hidden, my_logits, mine, dout.get<uint16_t>(), s);
    synchronize_with_nccl(s, comm);
    std::vector<double> st[6], total;
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      if (o.cold_l2) flusher.flush(s);
      ep->forward(my_hidden, my_logits, mine, dout.get<uint16_t>(), s, ev);
      synchronize_with_nccl(s, comm);  // (the event is the last work on s)
      if (i < o.warmup) continue;
      double sum = 0;
      for (int k = 0; k < 6; ++k) {
        float ms;
        FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[k], ev[k + 1]));
        st[k].push_back(ms * 1e3);
        sum += ms * 1e3;
      }
      total.push_back(sum);
    }
    // Every rank: its tokens against the whole layer on its GPU; the error sums over the ranks.
    double sums[2] = {0, 0};
    if (single && mine > 0) {
      std::vector<uint16_t> got(mine * H), want(mine * H);
      FP4MOE_CUDA_CHECK(cudaMemcpy(got.data(), dout.get(), got.size() * 2, cudaMemcpyDeviceToHost));
      single->forward(my_hidden, my_logits, mine, done.get<uint16_t>(), s);
      FP4MOE_CUDA_CHECK(cudaStreamSynchronize(s));
      FP4MOE_CUDA_CHECK(cudaMemcpy(want.data(), done.get(), want.size() * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < got.size(); ++i) {
        const double x = Bf16::from_bits(got[i]).to_float(), y = Bf16::from_bits(want[i]).to_float();
        sums[0] += std::isfinite(x) ? (x - y) * (x - y) : INFINITY;
        sums[1] += y * y;
      }
    }
    FP4MOE_CUDA_CHECK(cudaMemcpy(err_sums.get(), sums, 16, cudaMemcpyHostToDevice));
    FP4MOE_NCCL_CHECK(nccl.all_reduce(err_sums.get(), err_sums.get(), 2, ncclFloat64, ncclSum, comm, s));
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(sums, err_sums.get(), 16, cudaMemcpyDeviceToHost, s));
    synchronize_with_nccl(s, comm);
    const double err = sums[1] > 0 ? std::sqrt(sums[0] / sums[1]) : std::sqrt(sums[0]);
    if (rank != 0) continue;
    double single_us = 0;
    if (single) {
      single_us = 1e6 * median_event_time(o.warmup, o.iters, s,
                                          [&] { single->forward(dh.get<uint16_t>(), dl.get<float>(), T,
                                                                done.get<uint16_t>(), s); },
                                          [&] { if (o.cold_l2) flusher.flush(s); });
    }
    const double ep_us = median(total);
    const double comm_us = median(st[1]) + median(st[2]) + median(st[4]);
    std::printf("%6lld | %8.1f %9.1f %9.1f %9.1f %9.1f %9.1f | %9.1f %5.1f%% | %10.1f %6.2fx | %9.2e\n",
                static_cast<long long>(T), median(st[0]), median(st[1]), median(st[2]), median(st[3]),
                median(st[4]), median(st[5]), ep_us, 100.0 * comm_us / ep_us, single_us,
                single_us > 0 ? single_us / ep_us : 0.0, err);
    std::fflush(stdout);
    FP4MOE_CHECK(!single || err < 1e-2, "T = ", T, ": the expert-parallel output differs from one GPU's by ", err,
                 " (relative Frobenius), more than 1e-2");
  }
  for (auto& e : ev) cudaEventDestroy(e);
}


}  // namespace

int run_dist_bench(const DistBenchOptions& o) {
  const std::string flag = o.mode == ShardMode::kTensor ? "--tp" : "--ep";
  FP4MOE_CHECK(o.world >= 2 && o.world <= 64, flag, " ", o.world, ": needs 2..64 ranks");
  FP4MOE_CHECK(!o.tokens.empty(), flag, ": no token counts");
  validate_shard(o.config, {o.mode, 0, o.world});
  NcclApi::get();  // a missing NCCL is reported once, before any rank starts
  // The page is unmapped on every way out (a failed probe or fork throws).
  void* mem = mmap(nullptr, sizeof(SharedPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  FP4MOE_CHECK(mem != MAP_FAILED, flag, ": cannot map the ranks' shared page");
  const std::unique_ptr<void, void (*)(void*)> mapping(mem, [](void* m) { munmap(m, sizeof(SharedPage)); });
  SharedPage* page = new (mem) SharedPage{};
  std::fflush(nullptr);
  probe_devices(page);
  if (page->devices < o.world) {
    const std::string why = page->probe_error[0] ? std::string(" (") + page->probe_error + ")" : "";
    FP4MOE_FAIL(flag, " ", o.world, " needs ", o.world, " GPUs, this machine has ", page->devices, why);
  }
  std::vector<pid_t> pids;  // pids[r]: rank r's process, 0 once reaped (a reaped pid may be reused)
  // Stops the ranks still running: a rank waits in NCCL for the others, for ever.
  auto stop_ranks = [&pids] {
    for (pid_t pid : pids)
      if (pid > 0) kill(pid, SIGTERM);
  };
  for (int r = 0; r < o.world; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      const int err = errno;
      page->failed.store(1);  // a rank still waiting for rank 0's id gives up
      stop_ranks();
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      FP4MOE_FAIL(flag, ": fork failed for rank ", r, " (", std::strerror(err), "); the ", pids.size(),
                  " ranks started were stopped");
    }
    if (pid == 0) {
      setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast stays off (shared machines)
      int status = 0;
      try {
        run_rank(o, r, page);
      } catch (const std::exception& e) {
        page->failed.store(1);
        std::fprintf(stderr, "fp4moe: rank %d: %s\n", r, e.what());
        status = 1;
      }
      std::fflush(nullptr);
      _exit(status);
    }
    pids.push_back(pid);
  }
  // A rank that fails leaves the others waiting in NCCL for it: stop them. A rank that failed by
  // an exception printed its message; one killed by a signal (the out-of-memory killer, a crash)
  // could not, so it is named here. The ranks stopped here are not.
  int failed = 0;
  for (size_t running = pids.size(); running > 0;) {
    int st = 0;
    const pid_t done = wait(&st);
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) break;
    const auto rank = std::find(pids.begin(), pids.end(), done);
    if (rank == pids.end()) continue;  // not a rank
    *rank = 0;
    --running;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    if (failed++ == 0) {
      if (WIFSIGNALED(st))
        std::fprintf(stderr, "fp4moe: rank %d was killed by signal %d (%s)%s\n", static_cast<int>(rank - pids.begin()),
                     WTERMSIG(st), strsignal(WTERMSIG(st)),
                     WTERMSIG(st) == SIGKILL ? ": the out-of-memory killer? each rank builds the whole layer in host memory"
                                             : "");
      stop_ranks();
    }
  }
  page->~SharedPage();
  return failed == 0 ? 0 : 1;
}

}  // namespace fp4moe
