// The multi-GPU benchmark (`fp4moe bench --tp P` / `--ep P`): one process per GPU, forked by the
// tool itself, NCCL between them (fp4moe/sharding.h says who holds what).
//   --tp: each rank holds 1/P of every expert's intermediate columns, runs the single-GPU layer on
//         its shard for all tokens and all-reduces the output; rank 0 reports routing / FC1 /
//         FC2 against the all-reduce (in the layer and alone).
//   --ep: each rank holds E/P experts and 1/P of the tokens (dist/ep_layer.h); rank 0 reports
//         routing, the count exchange, the dispatch, the experts, the return and the combine.
// Both compare with the whole layer on one GPU: time (rank 0, all tokens) and output (TP: rank
// 0's output; EP: every rank's tokens, errors summed over the ranks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp4moe/moe.h"
#include "fp4moe/sharding.h"

namespace fp4moe {

struct DistBenchOptions {
  MoeConfig config;  // the whole layer
  ShardMode mode = ShardMode::kTensor;
  int world = 2;
  std::vector<int64_t> tokens;  // the whole batch (EP splits it over the ranks)
  uint64_t seed = 1;
  int warmup = 5;
  int iters = 30;
  bool cold_l2 = true;
  bool compare_single_gpu = true;
};

// Forks `world` ranks (the calling process must not have initialized CUDA); returns once all
// have exited: 0 when every rank succeeded. Rank 0 prints the table on stdout; a failing rank
// prints one line on stderr and stops the others.
int run_dist_bench(const DistBenchOptions& options);

}  // namespace fp4moe
