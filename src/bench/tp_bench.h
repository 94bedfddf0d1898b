// The tensor-parallel benchmark (`fp4moe bench --tp P`): one process per GPU, forked by the tool
// itself, NCCL between them. Each rank holds 1/P of every expert's intermediate columns
// (fp4moe/sharding.h), runs the single-GPU layer on its shard and all-reduces the output. Rank
// 0 reports, per token count, the split between the GEMMs (routing, FC1, FC2) and the
// all-reduce, the all-reduce alone, and the TP layer against the whole layer on one GPU (time
// and output).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp4moe/moe.h"

namespace fp4moe {

struct TpBenchOptions {
  MoeConfig config;  // the whole layer (the shard divides I by world)
  int world = 2;
  std::vector<int64_t> tokens;
  uint64_t seed = 1;
  int warmup = 5;
  int iters = 30;
  bool cold_l2 = true;
  bool compare_single_gpu = true;  // rank 0 also runs the whole layer on its GPU
};

// Forks `world` ranks (the calling process must not have initialized CUDA); returns once all
// have exited: 0 when every rank succeeded. Rank 0 prints the table on stdout; a failing rank
// prints one line on stderr.
int run_tp_bench(const TpBenchOptions& options);

}  // namespace fp4moe
