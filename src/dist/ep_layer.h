// The expert-parallel MoE layer: rank r of P holds the routed experts [r E/P, (r+1) E/P) whole
// (fp4moe/sharding.h) and the shared expert, and its own tokens. One forward:
//   1. route the rank's tokens over all E experts (the single-GPU routing kernel): the permuted
//      rows come grouped by expert, hence by the rank that owns the expert;
//   2. gather the rows' hidden states; all-gather every rank's expert offsets [E + 1] and a word,
//      0 where the rank refused the call, else its tokens + 1 (the one host synchronization:
//      NCCL takes its message sizes from the host; every rank throws when any refused);
//   3. dispatch: NCCL send/recv, one of each per peer (a rank's rows of a peer's experts are one
//      range of its permuted rows), received source-major: each source rank's rows, by local
//      expert within them;
//   4. the local experts on the received rows: the single-GPU layer over E/P experts, driven by
//      one-hot router logits (top-1, weight exactly 1), so every row comes back as bf16 expert(x);
//   5. return: the reverse send/recv, each row to the slot it left;
//   6. the shared expert on the rank's own tokens (a one-expert layer), then the combine: per
//      token the routing-weighted sum of its slots in slot order plus the shared expert, fp32,
//      rounded once (deterministic: the same bits on every run).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "dist/nccl_api.h"
#include "fp4moe/layer.h"
#include "fp4moe/sharding.h"
#include "runtime/device_buffer.h"

namespace fp4moe {

class EpMoeLayer {
 public:
  // `weights`: the whole layer or this rank's shard_weights(..., {kExpert, rank, world}); the
  // current CUDA device is this rank's, and `comm` (not owned) the ranks' communicator, whose
  // size, rank and GPU must be the shard's. Throws on a bad split, missing experts, a router the
  // routing kernel cannot run, or another communicator.
  EpMoeLayer(const MoeWeights& weights, const Shard& shard, ncclComm_t comm);

  const MoeConfig& config() const { return cfg_; }
  // out [T, H] bf16 = the MoE layer on this rank's tokens hidden [T, H] bf16 with router logits
  // [T, E] fp32 (device memory of the layer's GPU). Every rank calls it (T may differ between
  // ranks; a rank with T = 0 still takes part in the exchanges). Bad input on any rank (a token
  // count, a pointer) or a failed allocation for its own rows is thrown by every rank, after the
  // count exchange. What fails after it (an allocation for the rows a rank receives, a CUDA or
  // NCCL error) is thrown by that rank alone while the others wait in the next exchange: as after
  // any NCCL failure, the caller aborts the communicator on every rank (ncclCommAbort).
  // events (7, or null): before the routing, after routing + gather, after the count exchange,
  // after the dispatch, after the experts, after the return, after the combine.
  // run_experts = false returns every row unchanged instead (the dispatch/return test).
  void forward(const uint16_t* hidden, const float* logits, int64_t tokens, uint16_t* out, cudaStream_t stream,
               cudaEvent_t const* events = nullptr, bool run_experts = true);

  // After a forward: the rows this rank sent (permuted order), the rows it received for its
  // experts and their outputs (the received rows themselves with the experts bypassed), what came
  // back, and how many.
  const uint16_t* sent_rows() const { return send_rows_.get<uint16_t>(); }
  const uint16_t* received_rows() const { return recv_rows_.get<uint16_t>(); }
  const uint16_t* expert_outputs() const { return recv_out_.get<uint16_t>(); }
  const uint16_t* returned_rows() const { return back_rows_.get<uint16_t>(); }
  int64_t sent_row_count() const { return sent_; }
  int64_t received_row_count() const { return received_; }

 private:
  MoeConfig cfg_;
  Shard shard_;
  ncclComm_t comm_;
  int device_ = 0;  // the GPU current when the layer was made
  int local_begin_ = 0, local_experts_ = 0;
  std::unique_ptr<GpuMoeLayer> experts_, shared_;
  DeviceBuffer bias_;
  // per call
  DeviceBuffer topk_ids_, topk_w_, offsets_, row_token_, row_weight_, pair_row_, chunk_counts_;
  DeviceBuffer send_rows_, back_rows_, recv_rows_, recv_out_, onehot_, recv_offsets_, all_counts_, ones_, shared_out_;
  std::vector<int> host_counts_;  // [world][E + 2]: every rank's expert offsets and its word (forward())
  int64_t sent_ = 0, received_ = 0;
};

}  // namespace fp4moe
