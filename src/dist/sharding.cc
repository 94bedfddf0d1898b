#include "fp4moe/sharding.h"

#include "fp4moe/error.h"

namespace fp4moe {

const char* to_string(ShardMode m) { return m == ShardMode::kTensor ? "tensor" : "expert"; }

namespace {

void check_rank(const Shard& s) {
  FP4MOE_CHECK(s.world >= 1, "shard: world size ", s.world, " must be >= 1");
  FP4MOE_CHECK(s.rank >= 0 && s.rank < s.world, "shard: rank ", s.rank, " outside [0, ", s.world, ")");
}

}  // namespace

void validate_shard(const MoeConfig& cfg, const Shard& s) {
  check_rank(s);
  if (s.mode == ShardMode::kTensor) {
    FP4MOE_CHECK(cfg.intermediate % (int64_t{16} * s.world) == 0, "tensor parallel ", s.world,
                 ": the intermediate size ", cfg.intermediate, " must split into multiples of 16 (I % ",
                 int64_t{16} * s.world, " == 0)");
    FP4MOE_CHECK(cfg.shared_intermediate % (int64_t{16} * s.world) == 0, "tensor parallel ", s.world,
                 ": the shared expert's intermediate size ", cfg.shared_intermediate,
                 " must split into multiples of 16");
  } else {
    FP4MOE_CHECK(cfg.num_experts % s.world == 0, "expert parallel ", s.world, ": ", cfg.num_experts,
                 " experts do not split evenly");
  }
}

IndexRange tp_columns(int64_t intermediate, const Shard& s) {
  check_rank(s);
  FP4MOE_CHECK(intermediate >= 0 && intermediate % (int64_t{16} * s.world) == 0, "tensor parallel ", s.world,
               ": ", intermediate, " columns do not split into whole 16-column blocks");
  const int64_t w = intermediate / s.world;
  return {s.rank * w, (s.rank + 1) * w};
}

IndexRange ep_experts(int num_experts, const Shard& s) {
  check_rank(s);
  FP4MOE_CHECK(num_experts >= 0 && num_experts % s.world == 0, "expert parallel ", s.world, ": ", num_experts,
               " experts do not split evenly");
  const int64_t w = num_experts / s.world;
  return {s.rank * w, (s.rank + 1) * w};
}

Nvfp4Matrix slice_rows(const Nvfp4Matrix& m, IndexRange r) {
  m.validate("slice_rows");
  FP4MOE_CHECK(r.begin >= 0 && r.begin <= r.end && r.end <= m.rows, "slice_rows: [", r.begin, ", ", r.end,
               ") outside ", m.rows, " rows");
  Nvfp4Matrix s;
  s.rows = r.size();
  s.cols = m.cols;
  s.global_scale = m.global_scale;
  s.data.assign(m.data.begin() + r.begin * (m.cols / 2), m.data.begin() + r.end * (m.cols / 2));
  s.block_scales.assign(m.block_scales.begin() + r.begin * m.blocks_per_row(),
                        m.block_scales.begin() + r.end * m.blocks_per_row());
  return s;
}

Nvfp4Matrix slice_cols(const Nvfp4Matrix& m, IndexRange c) {
  m.validate("slice_cols");
  FP4MOE_CHECK(c.begin >= 0 && c.begin <= c.end && c.end <= m.cols && c.begin % 16 == 0 && c.end % 16 == 0,
               "slice_cols: [", c.begin, ", ", c.end, ") is not a range of whole 16-column blocks of ", m.cols);
  Nvfp4Matrix s;
  s.rows = m.rows;
  s.cols = c.size();
  s.global_scale = m.global_scale;
  s.data.reserve(s.rows * s.cols / 2);
  s.block_scales.reserve(s.rows * s.blocks_per_row());
  for (int64_t r = 0; r < m.rows; ++r) {
    const auto row = m.data.begin() + r * (m.cols / 2);
    s.data.insert(s.data.end(), row + c.begin / 2, row + c.end / 2);
    const auto srow = m.block_scales.begin() + r * m.blocks_per_row();
    s.block_scales.insert(s.block_scales.end(), srow + c.begin / 16, srow + c.end / 16);
  }
  return s;
}

MoeConfig shard_config(const MoeConfig& cfg, const Shard& s) {
  cfg.validate();  // (a negative width would divide into another negative one)
  validate_shard(cfg, s);
  MoeConfig c = cfg;
  if (s.mode == ShardMode::kTensor) {
    c.intermediate = cfg.intermediate / s.world;
    c.shared_intermediate = cfg.shared_intermediate / s.world;
  }
  return c;
}

namespace {

ExpertWeights tp_expert(const ExpertWeights& e, IndexRange cols) {
  ExpertWeights out = e;
  out.gate = slice_rows(e.gate, cols);
  out.up = slice_rows(e.up, cols);
  out.down = slice_cols(e.down, cols);
  return out;
}

}  // namespace

MoeWeights shard_weights(const MoeWeights& full, const Shard& s) {
  full.validate();
  MoeWeights w;
  w.config = shard_config(full.config, s);
  w.router_weight = full.router_weight;
  w.correction_bias = full.correction_bias;
  w.experts.resize(full.experts.size());
  if (s.mode == ShardMode::kTensor) {
    const IndexRange cols = tp_columns(full.config.intermediate, s);
    for (size_t e = 0; e < full.experts.size(); ++e)
      if (full.experts[e].materialized()) w.experts[e] = tp_expert(full.experts[e], cols);
    if (full.shared) w.shared = tp_expert(*full.shared, tp_columns(full.config.shared_intermediate, s));
  } else {
    const IndexRange mine = ep_experts(full.config.num_experts, s);
    for (int64_t e = mine.begin; e < mine.end; ++e) w.experts[e] = full.experts[e];
    w.shared = full.shared;
  }
  return w;
}

}  // namespace fp4moe
