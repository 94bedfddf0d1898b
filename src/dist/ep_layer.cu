// The expert-parallel layer (see ep_layer.h).
#include "dist/ep_layer.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "fp4moe/error.h"
#include "kernels/common/cuda_check.h"
#include "kernels/moe/routing.cuh"
#include "runtime/device_pointer.h"

namespace fp4moe {
namespace {

// send[p] = hidden[row_token[p]]: one 16-byte unit per thread, grid-stride.
__global__ void gather_rows_natural(const uint4* hidden, const int* row_token, int64_t rows, int64_t units_per_row,
                                    uint4* send) {
  const int64_t total = rows * units_per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / units_per_row, u = i - r * units_per_row;
    send[i] = hidden[row_token[r] * units_per_row + u];
  }
}

// Router logits that send received row i to its local expert alone: 30 there, 0 elsewhere
// (softmax top-1, renormalized: weight 1). The received rows come source rank by source rank,
// each rank's by local expert: segment j = src * experts + e holds rows
// [segments[j], segments[j + 1]) of local expert e.
__global__ void onehot_logits(const int* segments, int num_segments, int experts, int64_t rows, float* logits) {
  const int64_t total = rows * experts;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / experts;
    const int e = static_cast<int>(i - row * experts);
    int lo = 0, hi = num_segments;  // segments[lo] <= row < segments[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) >> 1;
      if (segments[mid] <= row) lo = mid; else hi = mid;
    }
    logits[i] = e == lo % experts ? 30.0f : 0.0f;
  }
}

__device__ __forceinline__ void add_bf16x2(float& a, float& b, uint32_t v, float w) {
  a += w * __uint_as_float(v << 16);
  b += w * __uint_as_float(v & 0xFFFF0000u);
}

// out[t] = sum over slots j (in order) of weight[t][j] * back[pair_row[t][j]] (+ shared[t]),
// fp32, one rounding to bf16. 8 elements per thread.
__global__ void combine_slots(const uint4* back, const int* pair_row, const float* weight, const uint4* shared,
                              int64_t tokens, int k, int64_t units_per_row, uint4* out) {
  const int64_t total = tokens * units_per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / units_per_row, u = i - t * units_per_row;
    float acc[8] = {};
    for (int j = 0; j < k; ++j) {
      const float w = weight[t * k + j];
      const uint4 v = back[pair_row[t * k + j] * units_per_row + u];
      add_bf16x2(acc[0], acc[1], v.x, w);
      add_bf16x2(acc[2], acc[3], v.y, w);
      add_bf16x2(acc[4], acc[5], v.z, w);
      add_bf16x2(acc[6], acc[7], v.w, w);
    }
    if (shared) {
      const uint4 v = shared[i];
      add_bf16x2(acc[0], acc[1], v.x, 1.0f);
      add_bf16x2(acc[2], acc[3], v.y, 1.0f);
      add_bf16x2(acc[4], acc[5], v.z, 1.0f);
      add_bf16x2(acc[6], acc[7], v.w, 1.0f);
    }
    uint32_t o[4];
    for (int q = 0; q < 4; ++q) {
      const __nv_bfloat162 b = __floats2bfloat162_rn(acc[2 * q], acc[2 * q + 1]);
      o[q] = *reinterpret_cast<const uint32_t*>(&b);
    }
    out[i] = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

__global__ void set_word(int* at, int value) { *at = value; }

int grid_for(int64_t work) { return static_cast<int>(std::clamp<int64_t>((work + 255) / 256, 1, 4096)); }

MoeConfig single_router_config(const MoeConfig& cfg, const std::string& name, int experts, int64_t intermediate) {
  MoeConfig c;
  c.name = name;
  c.hidden = cfg.hidden;
  c.intermediate = intermediate;
  c.num_experts = experts;
  c.routing.mode = RoutingMode::kSoftmaxTopK;
  c.routing.top_k = 1;
  c.routing.norm_topk_prob = true;
  c.routing.routed_scaling_factor = 1.0f;
  c.quantize_activations = cfg.quantize_activations;
  return c;
}

}  // namespace

EpMoeLayer::EpMoeLayer(const MoeWeights& w, const Shard& shard, ncclComm_t comm)
    : cfg_(w.config), shard_(shard), comm_(comm) {
  FP4MOE_CHECK(shard.mode == ShardMode::kExpert, "EpMoeLayer: an expert-parallel shard is needed");
  w.validate();  // the expert list, the router's bias (uploaded as E floats) and its values
  validate_shard(cfg_, shard);
  // The routing runs on the whole router here, not through the local layer (whose creation checks
  // only its own one-expert routing): a shape its kernel refuses must be refused now, on every
  // rank. Refused in forward(), it would throw only on the ranks with tokens, and the others
  // would wait in the collective for them forever.
  kernels::check_routing_shape(cfg_.num_experts, cfg_.routing.top_k, cfg_.routing.n_group, cfg_.routing.topk_group);
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device_));
  // The communicator must be the shard's: its size sizes the gathered counts, its rank says which
  // rows are this rank's. Another (a rank given the wrong shard, a communicator of other ranks)
  // would move rows into buffers sized for other counts.
  const NcclApi& nccl = NcclApi::get();
  int comm_ranks = 0, comm_rank = 0, comm_device = 0;
  FP4MOE_NCCL_CHECK(nccl.comm_count(comm, &comm_ranks));
  FP4MOE_NCCL_CHECK(nccl.comm_user_rank(comm, &comm_rank));
  FP4MOE_NCCL_CHECK(nccl.comm_cu_device(comm, &comm_device));
  FP4MOE_CHECK(comm_ranks == shard.world && comm_rank == shard.rank, "EpMoeLayer: the shard is rank ", shard.rank,
               " of ", shard.world, ", the communicator's rank ", comm_rank, " of ", comm_ranks);
  FP4MOE_CHECK(comm_device == device_, "EpMoeLayer: the communicator is on GPU ", comm_device,
               ", the current device is GPU ", device_);
  const IndexRange mine = ep_experts(cfg_.num_experts, shard);
  local_begin_ = static_cast<int>(mine.begin);
  local_experts_ = static_cast<int>(mine.size());
  LayerOptions lo;
  lo.device = device_;
  lo.use_tuning_cache = false;
  MoeWeights local;
  local.config = single_router_config(cfg_, cfg_.name + "-ep-experts", local_experts_, cfg_.intermediate);
  for (int64_t e = mine.begin; e < mine.end; ++e) {
    FP4MOE_CHECK(w.experts[e].materialized(), "EpMoeLayer: rank ", shard.rank, " lacks its expert ", e);
    local.experts.push_back(w.experts[e]);
  }
  experts_ = GpuMoeLayer::create(local, lo);
  if (cfg_.has_shared_expert()) {
    FP4MOE_CHECK(w.shared.has_value(), "EpMoeLayer: the shared expert is missing");
    MoeWeights sw;
    sw.config = single_router_config(cfg_, cfg_.name + "-ep-shared", 1, cfg_.shared_intermediate);
    sw.experts.push_back(*w.shared);
    shared_ = GpuMoeLayer::create(sw, lo);
  }
  if (cfg_.routing.mode == RoutingMode::kSigmoidNoAuxTc && !w.correction_bias.empty()) {
    bias_.resize(w.correction_bias.size() * 4);
    FP4MOE_CUDA_CHECK(cudaMemcpy(bias_.get(), w.correction_bias.data(), bias_.bytes(), cudaMemcpyHostToDevice));
  }
  // The buffers whose size depends on the shape alone, here: in forward() their allocation would
  // come before the count exchange, outside what a rank can refuse together with the others.
  offsets_.resize((cfg_.num_experts + 2) * 4);
  all_counts_.resize(int64_t{shard.world} * (cfg_.num_experts + 2) * 4);
  chunk_counts_.resize(size_t(kernels::routing_scratch_ints(cfg_.num_experts)) * 4);
}

void EpMoeLayer::forward(const uint16_t* hidden, const float* logits, int64_t T, uint16_t* out, cudaStream_t s,
                         cudaEvent_t const* events, bool run_experts) {
  const ScopedDevice on_device(device_);
  const NcclApi& nccl = NcclApi::get();
  auto record = [&](int i) {
    if (events) FP4MOE_CUDA_CHECK(cudaEventRecord(events[i], s));
  };
  const int E = cfg_.num_experts, k = cfg_.routing.top_k, world = shard_.world;
  const int64_t H = cfg_.hidden, units = H / 8;
  // The count exchange carries, after each rank's E + 1 expert offsets, a word: 0 where the rank
  // refused the call, else its token count + 1. What a rank finds wrong with its input, or cannot
  // allocate for its own rows, before the exchange is thrown by every rank after it, together
  // (one rank throwing alone left the others waiting in the exchange for ever); and every rank
  // can check every rank's offsets against its rows. (What fails after the exchange - a buffer
  // for the rows received, a CUDA error - fails on its rank alone: see ep_layer.h.)
  const int64_t stride = E + 2;
  std::string refusal;
  int64_t P = 0;
  try {
    FP4MOE_CHECK(T >= 0 && T <= (int64_t{1} << 24), "EP forward: token count ", T, " out of [0, 2^24]");
    if (T > 0) check_layer_io("EP forward", hidden, logits, out, T, H, E, device_);
    P = T * k;
    topk_ids_.resize(P * 4);
    topk_w_.resize(P * 4);
    row_token_.resize(P * 4);
    row_weight_.resize(P * 4);
    pair_row_.resize(P * 4);
    send_rows_.resize(P * H * 2);
    back_rows_.resize(P * H * 2);
  } catch (const Error& e) {
    refusal = e.what();
  }

  // 1. Route this rank's tokens over all experts and gather their rows (grouped by expert).
  record(0);
  if (T == 0 || !refusal.empty())  // no rows from here, but the exchanges need this rank
    FP4MOE_CUDA_CHECK(cudaMemsetAsync(offsets_.get(), 0, (E + 1) * 4, s));
  // (by a kernel argument: a copy from pageable host memory may wait for the stream)
  set_word<<<1, 1, 0, s>>>(offsets_.get<int>() + E + 1, refusal.empty() ? static_cast<int>(T) + 1 : 0);
  FP4MOE_CUDA_CHECK_LAUNCH();
  if (T > 0 && refusal.empty()) {
    kernels::RoutingParams rp = kernels::routing_params_for(cfg_, T);
    rp.logits = logits;
    rp.correction_bias = bias_.bytes() ? bias_.get<float>() : nullptr;
    rp.shared_expert = false;  // the shared expert runs apart, on this rank's tokens
    rp.topk_ids = topk_ids_.get<int>();
    rp.topk_weights = topk_w_.get<float>();
    rp.expert_offsets = offsets_.get<int>();
    rp.row_token = row_token_.get<int>();
    rp.row_weight = row_weight_.get<float>();
    rp.pair_row = pair_row_.get<int>();
    rp.chunk_counts = chunk_counts_.get<int>();
    kernels::launch_routing(rp, s, /*pdl=*/false);
    gather_rows_natural<<<grid_for(P * units), 256, 0, s>>>(reinterpret_cast<const uint4*>(hidden),
                                                            row_token_.get<int>(), P, units, send_rows_.get<uint4>());
    FP4MOE_CUDA_CHECK_LAUNCH();
  }
  record(1);

  // 2. Every rank's expert offsets and refusal word, to the host: NCCL's message sizes are host
  // values.
  FP4MOE_NCCL_CHECK(nccl.all_gather(offsets_.get(), all_counts_.get(), stride, ncclInt32, comm_, s));
  host_counts_.resize(static_cast<size_t>(world * stride));
  FP4MOE_CUDA_CHECK(cudaMemcpyAsync(host_counts_.data(), all_counts_.get(), host_counts_.size() * 4,
                                    cudaMemcpyDeviceToHost, s));
  synchronize_with_nccl(s, comm_);
  record(2);
  auto off = [&](int rank, int e) { return int64_t{host_counts_[static_cast<size_t>(rank * stride + e)]}; };
  auto count = [&](int rank, int e) { return off(rank, e + 1) - off(rank, e); };
  const int me = shard_.rank;
  const int per_rank = E / world;
  FP4MOE_CHECK(refusal.empty(), refusal);
  for (int r = 0; r < world; ++r)
    FP4MOE_CHECK(off(r, E + 1) != 0, "expert parallel: rank ", r, " refused this call (its message says why)");
  // The table sizes every transfer: offsets that do not rise from 0 to the rank's rows (which no
  // routing writes, but which would move rows past a buffer) are refused by all ranks alike.
  for (int r = 0; r < world; ++r) {
    bool rising = off(r, 0) == 0;
    for (int e = 0; e < E; ++e) rising = rising && count(r, e) >= 0;
    FP4MOE_CHECK(rising && off(r, E) == (off(r, E + 1) - 1) * k, "expert parallel: rank ", r,
                 "'s expert offsets are corrupt (", off(r, E), " rows of ", (off(r, E + 1) - 1) * k, ")");
  }
  // Every rank's received rows, from the counts every rank now holds: a batch that one rank's
  // experts cannot take (their layer's 2^24 rows) is refused by all ranks here, before any of
  // them enters an exchange that the others would wait in forever.
  for (int r = 0; r < world; ++r) {
    int64_t rows = 0;
    for (int src = 0; src < world; ++src)
      for (int e = r * per_rank; e < (r + 1) * per_rank; ++e) rows += count(src, e);
    FP4MOE_CHECK(rows <= (int64_t{1} << 24), "expert parallel: rank ", r, " would receive ", rows,
                 " rows, more than its experts' layer takes (2^24)");
  }
  // Received rows, source rank by source rank and each rank's by local expert: segment
  // src * local_experts + le starts at recv_pos[...]. So what a peer sends is one contiguous
  // range on both sides (its rows of my experts are contiguous in its permuted order), one NCCL
  // send and one receive per peer; one per (peer, expert) pair made the exchange hundreds of
  // small operations (241 us at T = 16 for glm5 on two H200s).
  std::vector<int64_t> recv_pos(static_cast<size_t>(world) * local_experts_ + 1, 0);
  for (int src = 0; src < world; ++src)
    for (int le = 0; le < local_experts_; ++le) {
      const size_t i = static_cast<size_t>(src) * local_experts_ + le;
      recv_pos[i + 1] = recv_pos[i] + count(src, local_begin_ + le);
    }
  const int64_t R = recv_pos.back();
  FP4MOE_CHECK(R <= std::numeric_limits<int>::max(), "expert parallel: ", R, " received rows exceed the int32 row index");
  sent_ = off(me, E);
  received_ = R;
  recv_rows_.resize(std::max<int64_t>(1, R) * H * 2);
  recv_out_.resize(std::max<int64_t>(1, R) * H * 2);

  // 3. Dispatch: the rows of expert e to e's rank.
  auto exchange = [&](bool forward_direction) {
    FP4MOE_NCCL_CHECK(nccl.group_start());
    for (int peer = 0; peer < world; ++peer) {
      // My rows of the peer's experts, in my permuted order.
      const int64_t mine_at = off(me, peer * per_rank), mine_n = off(me, (peer + 1) * per_rank) - mine_at;
      if (mine_n > 0) {
        uint16_t* mine = (forward_direction ? send_rows_ : back_rows_).get<uint16_t>() + mine_at * H;
        if (forward_direction)
          FP4MOE_NCCL_CHECK(nccl.send(mine, mine_n * H, ncclBfloat16, peer, comm_, s));
        else
          FP4MOE_NCCL_CHECK(nccl.recv(mine, mine_n * H, ncclBfloat16, peer, comm_, s));
      }
      // The peer's rows of my experts, its segment of the received rows.
      const int64_t theirs_at = recv_pos[static_cast<size_t>(peer) * local_experts_];
      const int64_t theirs_n = recv_pos[static_cast<size_t>(peer + 1) * local_experts_] - theirs_at;
      if (theirs_n > 0) {
        if (forward_direction)
          FP4MOE_NCCL_CHECK(nccl.recv(recv_rows_.get<uint16_t>() + theirs_at * H, theirs_n * H, ncclBfloat16, peer,
                                      comm_, s));
        else
          FP4MOE_NCCL_CHECK(nccl.send(recv_out_.get<uint16_t>() + theirs_at * H, theirs_n * H, ncclBfloat16, peer,
                                      comm_, s));
      }
    }
    FP4MOE_NCCL_CHECK(nccl.group_end());
  };
  exchange(true);
  record(3);

  // 4. The local experts on the received rows (each row to its expert alone, weight 1).
  if (R > 0) {
    if (run_experts) {
      const std::vector<int> segments(recv_pos.begin(), recv_pos.end());  // R fits in int (checked above)
      recv_offsets_.resize(segments.size() * 4);
      onehot_.resize(R * local_experts_ * 4);
      FP4MOE_CUDA_CHECK(cudaMemcpyAsync(recv_offsets_.get(), segments.data(), segments.size() * 4,
                                        cudaMemcpyHostToDevice, s));
      onehot_logits<<<grid_for(R * local_experts_), 256, 0, s>>>(recv_offsets_.get<int>(),
                                                                  static_cast<int>(segments.size()) - 1,
                                                                  local_experts_, R, onehot_.get<float>());
      FP4MOE_CUDA_CHECK_LAUNCH();
      experts_->forward(recv_rows_.get<uint16_t>(), onehot_.get<float>(), R, recv_out_.get<uint16_t>(), s);
    } else {
      FP4MOE_CUDA_CHECK(cudaMemcpyAsync(recv_out_.get(), recv_rows_.get(), R * H * 2, cudaMemcpyDeviceToDevice, s));
    }
  }
  record(4);

  // 5. Return: each row to the slot it left.
  exchange(false);
  record(5);

  // 6. The shared expert on this rank's tokens, then the combine in slot order.
  if (T == 0) {
    record(6);
    return;
  }
  const uint4* shared = nullptr;
  if (shared_) {
    ones_.resize(T * 4);
    shared_out_.resize(T * H * 2);
    FP4MOE_CUDA_CHECK(cudaMemsetAsync(ones_.get(), 0, T * 4, s));  // one expert: softmax weight 1
    shared_->forward(hidden, ones_.get<float>(), T, shared_out_.get<uint16_t>(), s);
    shared = shared_out_.get<uint4>();
  }
  combine_slots<<<grid_for(T * units), 256, 0, s>>>(back_rows_.get<uint4>(), pair_row_.get<int>(), topk_w_.get<float>(),
                                                   shared, T, k, units, reinterpret_cast<uint4*>(out));
  FP4MOE_CUDA_CHECK_LAUNCH();
  record(6);
}

}  // namespace fp4moe
