// fp4moe/tactic.h - a Tactic names a kernel family and its parameters. It is a structural
// type, so a kernel takes it whole as its one template parameter (template <Tactic kT>), and it
// has one canonical text form used by the tuning cache, the CLI and the logs:
//
//   w4a16_mma:m128n16k256:s4:w4:sk1:finalize
//   family   :rows x tokens x K : stages : warps : split-K : epilogue   [:swapab]
//
// Tile dims are named by role (we compute out^T = W . X^T): rows = weight rows (output
// features, the MMA's M side), tokens = the expert's tokens (the MMA's N side), K = reduction.
// For CUTLASS-profile tactics (family cutlass_sm120 / cutlass_sm100) M x N x K follow CUTLASS's
// own naming (M = A rows, N = B rows) with K in elements.
#pragma once

#include <string>

namespace fp4moe {

enum class Family : int {
  kW4a16Mma = 0,    // ours: FP4 weights dequantized to BF16 in registers, mma.sync m16n8k16 (sm_80+)
  kW4a16Wgmma = 1,  // ours: the same numerics on sm_90a wgmma (prefill)
  kCutlassSm120 = 2,  // CUTLASS block-scaled grouped GEMM, sm_120 (resource model profile b)
  kCutlassSm100 = 3,  // CUTLASS block-scaled grouped GEMM, sm_100 (resource model profile b)
  kW4a16Gemv = 4,   // ours: a whole batch of <= 8 tokens as the MMA's N, routing and slot sum fused (sm_80+)
  kW4a16Fused = 5,  // ours: the whole layer of <= 8 tokens in one persistent launch, work drawn as it runs (sm_90+)
};

enum class Epilogue : int {
  kNone = 0,      // raw GEMM output
  kSwiglu = 1,    // FC1: silu(gate) * up, gate/up rows interleaved in 8-row groups
  kFinalize = 2,  // FC2: weighted, deterministic sum over each token's experts
};

struct Tactic {
  Family family = Family::kW4a16Mma;
  int tile_rows = 128;   // weight rows per CTA (CUTLASS: M)
  int tile_tokens = 16;  // tokens per CTA (CUTLASS: N)
  int tile_k = 256;      // K elements per pipeline stage
  int stages = 4;        // 0 = "auto" (the family's carve-out rule picks)
  int warps = 4;         // 0 = the family's own (CUTLASS profiles)
  int split_k = 1;
  Epilogue epilogue = Epilogue::kNone;
  bool swap_ab = false;  // CUTLASS profile: A and B swapped (tokens on M)

  constexpr bool operator==(const Tactic&) const = default;
};

// A tactic packed into one integer, and back: kernels take this as their template parameter.
// NOTES: nvcc 13.0 accepts a class-type template parameter on a __global__ function but its
// host stub generator then emits code that does not compile, so the kernels carry the tactic
// as an integer and decode it at compile time.
constexpr unsigned long long encode_tactic(const Tactic& t) {
  return (static_cast<unsigned long long>(t.family) << 56) |
         (static_cast<unsigned long long>(t.tile_rows) << 44) |
         (static_cast<unsigned long long>(t.tile_tokens) << 34) |
         (static_cast<unsigned long long>(t.tile_k / 16) << 24) |
         (static_cast<unsigned long long>(t.stages) << 18) |
         (static_cast<unsigned long long>(t.warps) << 12) |
         (static_cast<unsigned long long>(t.split_k) << 4) |
         (static_cast<unsigned long long>(t.epilogue) << 1) | (t.swap_ab ? 1ull : 0ull);
}
constexpr Tactic decode_tactic(unsigned long long c) {
  return Tactic{static_cast<Family>(c >> 56),
                static_cast<int>((c >> 44) & 0xFFF),
                static_cast<int>((c >> 34) & 0x3FF),
                static_cast<int>((c >> 24) & 0x3FF) * 16,
                static_cast<int>((c >> 18) & 0x3F),
                static_cast<int>((c >> 12) & 0x3F),
                static_cast<int>((c >> 4) & 0xFF),
                static_cast<Epilogue>((c >> 1) & 0x7),
                (c & 1) != 0};
}

// Families whose tactic runs both GEMMs of the layer together, so that a plan names the same shape
// for FC1 (epilogue swiglu) and FC2 (finalize): w4a16_gemv (FC1 routes in every CTA, FC2 reads
// its [token][slot] rows) and w4a16_fused (one launch for the whole layer).
constexpr bool runs_gemms_together(Family f) { return f == Family::kW4a16Gemv || f == Family::kW4a16Fused; }
// The same shape with another epilogue: such a tactic's twin for the other GEMM.
inline Tactic with_epilogue(Tactic t, Epilogue e) {
  t.epilogue = e;
  return t;
}

const char* to_string(Family f);
const char* to_string(Epilogue e);
// Canonical text; parse_tactic(format_tactic(t)) == t for every valid tactic.
std::string format_tactic(const Tactic& t);
// Throws fp4moe::Error naming the bad field on malformed text.
Tactic parse_tactic(const std::string& text);
// Why `t` is not a tactic parse_tactic could return (sizes positive, within what encode_tactic
// packs, K a multiple of 16, warps given for our own families), or empty where it is. The entry
// points that take a Tactic built in code (the resource model) check it so; the string is built
// only for a bad tactic, as those run at every plan.
std::string tactic_range_error(const Tactic& t);

}  // namespace fp4moe
