// How the tuner judges a candidate plan's output (tuner.cu runs the plans, this compares; host
// code, so that the judgement is tested without a GPU). Two checks, on bf16 outputs [T, H]:
//   - the first tokens against the float64 reference (relative Frobenius error over those rows);
//   - every token's row against the heuristic plan's output of the same batch. The reference
//     costs the CPU seconds a token at glm5 size, so it sees only a few tokens; a tactic that
//     goes wrong in a later token tile (a partial last tile, an expert's second row block) would
//     pass it. The heuristic's plan is the one the GPU tests hold to the reference (every token
//     to T = 1024, sampled tokens above), and two correct plans differ by their fp32 summation
//     order and bf16 roundings alone: a row far from the heuristic's row is wrong.
#pragma once

#include <cstdint>
#include <vector>

namespace fp4moe {

// The first row (of H = hidden values) holding a NaN or Inf, or -1: an output poisoned with
// 0xFF bytes before the run shows here every value the plan left unwritten.
int64_t first_non_finite_row(const std::vector<uint16_t>& out, int64_t hidden);

// Relative Frobenius error of out's first ref.size() rows (H = hidden values each) against the
// reference rows (absolute where the reference is 0); infinite where one of those values is NaN
// or Inf.
double rel_error_vs_reference(const std::vector<uint16_t>& out, int64_t hidden,
                              const std::vector<std::vector<double>>& ref);

struct RowDifference {
  int64_t row = -1;    // the row with the largest relative difference (-1: no rows)
  double rel = 0;      // its ||got - want|| / ||want|| (||got - want|| where want's row is 0);
                       // infinite where got or want is not finite
};

// The row of `got` farthest, relatively, from the same row of `want` (both [rows, hidden]).
RowDifference worst_row_difference(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                                   int64_t hidden);

}  // namespace fp4moe
