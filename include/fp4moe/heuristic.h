// fp4moe/heuristic.h - the documented rule that picks a batch's tactics (the family, then its
// tile, per GEMM) when no tuning cache entry exists (docs/HEURISTIC.md).
#pragma once

#include <cstdint>

#include "fp4moe/hw.h"
#include "fp4moe/layer.h"
#include "fp4moe/moe.h"
#include "fp4moe/resource_model.h"

namespace fp4moe {

// Experts narrower than this (the intermediate size I, FC2's K: glm5-tp8's 256) take the
// prefill family later (kPrefillMinTokensNarrow) and the decode family's 8-token tile with 2
// stages at every mean (kDecodeTwoStagesMaxMean): the rules measured on glm5 (I = 2048)
// against glm5-tp8. (Their FC2 takes the same prefill tiles as wide experts' since the narrow
// experts were re-measured: docs/HEURISTIC.md.)
inline constexpr int64_t kWideExpert = 1024;
inline bool narrow_experts(const MoeConfig& cfg) { return cfg.intermediate < kWideExpert; }

// Dispatch between the families (sm_90a only; elsewhere the decode family always): the prefill
// family w4a16_wgmma from a mean of prefill_min_tokens(cfg, gpu) routed tokens per expert (T * k /
// E): kPrefillMinTokens, or kPrefillMinTokensNarrow for narrow experts (narrow_experts), or for
// wide experts on a GPU of less DRAM bandwidth per SM kPrefillMinTokensLowBandwidth; its tiles
// are chosen by the rules below. What first set these bounds (token tiles of 64 - then 7 stages,
// two CTAs per SM - below kPrefillN128MinTokens, of 128 below kPrefillN256MinTokens, else 256),
// measured on the H200,
// both GEMMs forced, two or three rounds in one process (docs/HEURISTIC.md has the tables): at
// 16 tokens per expert (T = 512) the two-CTA 64-token tile is level with the decode family's
// 256 x 16 tile on glm5 (I = 2048; over five device calls its runs 2467-2610 us, middle 2516,
// against 2319-2852, middle 2503: as fast, and steadier; it was 4-6% faster than the 128 x 16
// tile) and 12% slower on glm5-tp8 (I = 256: FC2's units are 4
// stages long and the prefill path's token gather is a fixed cost its small GEMMs do not hide);
// at 20 (T = 640) 13% faster on glm5 and 3% slower on glm5-tp8, at 24 (T = 768) 1.36x faster
// on glm5 and 6% on glm5-tp8. Against the 128-token tile it is
// 1.18x (glm5) and 1.3x (glm5-tp8) faster at 32 (T = 1024), 5-8% / 1.23x at 48, and 11-13%
// slower at 64 (glm5, T = 2048); the 256-token tile wins from 128 per expert (22%), loses at 64.
// Since the 256 x 64 tile takes 128 K a stage (m256n64k128:s6:w20, below) the prefill family
// starts lower: both GEMMs forced against the dispatched decode tile (m256n16k256:s2:w8), two
// rounds in one call (layer us): glm5 T = 320 (10 per expert) 1756/1648 against 1677/1681 (level),
// T = 384 (12) 1759/1694 against 1841/1844, T = 448 (14) 1703/1716 against 2242/2024; glm5-tp8
// T = 512 (16) 336/337 against 373/373, T = 640 (20) 378/379 against 439/441. With 256 K a
// stage (m256n64k256:s3:w20) it starts at 10 per expert on wide experts: glm5 T = 320
// 1582/1657 against the decode tile's 1692/1687, T = 256 (8) 1565/1558 against 1560/1565
// (level); glm5-tp8 T = 384 (12) 318/319 against 302/302 (narrow experts keep 16).
inline constexpr double kPrefillMinTokens = 10;
inline constexpr double kPrefillMinTokensNarrow = 16;
// Where DRAM gives each SM fewer bytes a second (below kPrefillLowBandwidthPerSmGbs: the H100 SXM,
// 3350 GB/s over 132 SMs, 25 GB/s an SM, against the H200's 4800 over 132, 36), wide experts take
// the prefill family from kPrefillMinTokensLowBandwidth: its per-weight instructions, which hold
// it back at few tokens per expert on the H200, fit under the slower stream there, and its TMA
// pipeline streams closer to the read floor than the decode family's. On H100 80GB HBM3 hosts
// (glm5, both GEMMs forced, `scripts/gpu_check.sh families`, layer us in the CUDA graph) the
// 256 x 64 tile (m256n64k256:s3:w20) leads the fastest decode tile from T = 12 (3/8 of a token per
// expert: 584.9 against 596.6) to T = 256 (1876.6 against 2148.0), the families meet at T = 10-11
// (531.4 / 538.4 against 531.3 / 538.0) and the decode tile leads below (T = 9: 507.4 against
// 490.4); docs/HEURISTIC.md, "The boundary on an H100", "Lower means on an H100" and "Between
// 1/4 and 3/8 on an H100", has the tables. Narrow experts keep kPrefillMinTokensNarrow there too (glm5-tp8 T = 384, 12 per
// expert: decode 347.8, prefill 351.1; T = 512: 428.9 against 374.0).
inline constexpr double kPrefillLowBandwidthPerSmGbs = 31;
inline constexpr double kPrefillMinTokensLowBandwidth = 0.375;
inline constexpr double kPrefillN128MinTokens = 56;
inline constexpr double kPrefillN256MinTokens = 96;

// Three consumer warpgroups: from kPrefillN128MinTokens (from kPrefillThreeWarpgroupsN144MaxTokens
// where the 256 x 128 and 192 x 144 tiles below take the means under it) the 192-row, 176-token tile (m192n176k128:s3:w16) replaces the 128- and
// 256-token ones for a GEMM whose rows it pads by at most kPrefillWideRowsMaxPadding more than
// the 128-row tiles do (glm5: FC1's 4096 rows 3%, FC2's 6144 none; glm5-tp8's FC1, 512 rows,
// 12.5%: not there), at every mean above - except, for a GEMM whose rows it does pad, from
// kPrefillWideRowsSpillMinTokens up to kPrefillWideRowsSpillMaxTokens (not included), where most
// experts spill past 176 tokens into a narrow second unit that costs a whole dequantization
// while the 256-token tile holds them in one; there the 128 x 256 tile. Measured on the H200
// (glm5, both GEMMs forced to m192n176 against the 128 x 256 tile, two rounds in one call, per
// GEMM in plain launches, build f73f903): FC2 (no padding) -7.5% at a mean of 152, -3% at 176,
// -1.5% at 192, -3.5% at 224, -8.5% at 256, -9% at 320, -7% at 384, -8% at 512; FC1 (3%
// padding) -3% at 152, +4% at 176, +6.5% at 192, +2.5% at 224, -2% at 256, -3% at 320, -1% at
// 384 and 512. Before (plain launches per GEMM against the tiles then dispatched): glm5 FC2 -5%
// at 56-80, -7.5% at 96, -6% at 128; FC1 level at 56-80, -4% at 96, -2.5% at 128; glm5-tp8 FC2
// -15% at 56-96 but 13% slower than the two-CTA 64-token tile at 48; glm5-tp8 FC1 (12.5%
// padding) 4-12% slower everywhere. The tile takes 128 K a stage (m192n176k128:s3:w16: its one
// fragment buffer refilled once per 64-K chunk, the stage's wait, slot and release once per two
// chunks, the width chosen once per unit): both GEMMs forced against its 64-K form
// (m192n176k64:s7), two rounds in one call (H200, glm5, per GEMM in plain launches): FC1 -3% at a
// mean of 128 (T = 4096), -2.5% at 256, -1.5% at 512; FC2 -2%, -2%, -1%; the layer at T = 4096
// 4726/4914 us against 4955/5053, T = 16384 17738/17795 against 18097/18094.
inline constexpr double kPrefillWideRowsSpillMinTokens = 160;
inline constexpr double kPrefillWideRowsSpillMaxTokens = 240;
inline constexpr double kPrefillWideRowsMaxPadding = 0.05;

// Four consumer warpgroups: below kPrefillN128MinTokens the 256-row, 64-token tile with 256 K a
// stage (m256n64k256:s3:w20, one CTA per SM sharing each token tile among 256 rows; the stage's
// wait, slot and release paid once per K group) replaces the two-CTA 128-row one where its rows
// pad by at most kPrefillWideRowsMaxPadding more (glm5 and glm5-tp8: none), FC2 of narrow
// experts too (glm5-tp8's K = 256: a unit is one stage), which took the 128-K form
// (m256n64k128:s6:w20, two stages a unit) until measured against it (H200, glm5-tp8, FC2 forced,
// three rounds in one call, layer us in the CUDA graph, FC2 in plain launches): T = 512 (16)
// 326.0/325.7/325.7 against 334.7/333.7/334.8 (FC2 142 against 151), T = 768 383.6/383.9/383.9
// against 392.1/392.0/392.2, T = 1024 419.2/419.6/420.2 against 428.3/428.5/428.2, T = 1536
// 500.8/500.9/501.5 against 510.9/510.8/510.9. Against the 128-K form, both GEMMs forced, two
// and three rounds in two calls (H200, per GEMM in plain launches): glm5 FC1 -7% at 12 tokens per expert, -6% at 16 and
// 32, -5% at 24, -3% at 48; FC2 -5%, -4%, -4%, -3.5%, -2.5%; the layer at T = 1024 1956/2107/2068
// us against 2217/2056/2201 (the graph's time there is bimodal), T = 512 1650/1645 against
// 1906/1744; glm5-tp8 FC1 -4% at 16 to 32 (layer T = 1024 420.4/420.7 against 430.3/429.3). At 56
// (glm5 T = 1792) FC1 3% faster than the 256 x 128 tile below, FC2 1%, the layer level; from 64 on
// 6-13% slower. The 128-K form against its 64-K one (m256n64k64:s10:w20), three rounds in one
// call (H200, layer us): glm5 T = 512 1699/1699/1694 against 1984/1985/1984, T = 768 -12%, T = 1024
// 2073/2180/2026 against 2209/2202/2221 (FC1 -10%, FC2 -10%), T = 1536 -5 to -10%; glm5-tp8
// T = 768 -8%, 1024 -8% (FC2 182 against 196 us for the two-CTA tile then dispatched), 1536 -6%.
// The 64-K form had been against the two-CTA tile: glm5 -10% at 16 tokens per expert, -9.5% at
// 24, -7% to -12% at 32; glm5-tp8 FC1 -2% to -11%, FC2 +2%. From 56 the 256 x 128 tile below
// (glm5 T = 1792: FC1 1965/1934 against 1987/2004 for m256n64k128, FC2 1098/1079 against
// 1110/1118; T = 2048 8-9% faster).
//
// From kPrefillN128MinTokens up to kPrefillFourWarpgroupsN128MaxTokens (not included) the
// 256-row, 128-token tile (m256n128:s7:w20: four consumer warpgroups, one fragment buffer)
// where its rows fit as above (for narrow experts' FC1 up to
// kPrefillFourWarpgroupsN128MaxTokensNarrow, below), and for FC2 of narrow experts at every mean
// from kPrefillN128MinTokens but the 192 x 176 band below. Per GEMM in plain launches against
// the dispatched tiles, two rounds (H200): glm5 FC1 -10% at 56, -9% at 64, -5% at 96, -1% at 104, +3% at 112 and +9.5% at 128
// (an expert past 128 tokens takes a second, nearly empty unit that costs a whole
// dequantization), FC2 -8%, -8%, -5%, level, +3%, +8%; glm5-tp8 FC1 (512 rows) -4% at 64, +5% at
// 128; glm5-tp8 FC2 (K = 256) -9% at 64, -7.5% at 96, -4.5% at 128, -4 to -13% at 192, -16% at
// 256, -14% at 512.
inline constexpr double kPrefillFourWarpgroupsN128MaxTokens = 104;

// Narrow experts (glm5-tp8) measured in that band again on the kernels of build 953acec (H200,
// glm5-tp8, one tile forced against the dispatched plan, three rounds in one call, layer us in
// the CUDA graph). FC1 (512 rows) keeps the 256 x 128 tile up to
// kPrefillFourWarpgroupsN128MaxTokensNarrow (not included) instead of taking the 128 x 256 one
// from 104: T = 3328 (mean 104) 845.0/846.4/844.4 against 901.0/897.2/898.6 (FC1 341 against
// 394 in plain launches), T = 3584 (112) 913.0/914.8/912.2 against 941.0/941.8/941.2, T = 4096
// (128) 1039.3/1038.6/1037.3 against 1033.5/1034.4/1033.3, T = 5376-6144 2.5-4% slower.
// FC2 (K = 256: a unit is two stages of 128 K) takes the 192 x 176 tile (m192n176k128:s3:w16)
// from kPrefillNarrowFc2N176MinTokens up to kPrefillNarrowFc2N176MaxTokens (not included),
// where its 256 x 128 tile took every mean from 56: T = 3072 (96) 802.4/802.6/800.7 against
// 792.7/791.4/795.1, T = 3328 (104) 897.3/896.8/894.1 against 901.0/897.2/898.6, T = 3584 (112)
// 930.3/929.4/930.3 against 941.3/942.3/940.5, T = 4096 (128) 1006.4/1005.6/1006.5 against
// 1034.1/1033.4/1032.2 (FC2 421-430 against 447-452), T = 5120 (160) 1194.0/1198.3/1194.5
// against 1214.5/1214.9/1214.9, T = 5632 (176) 1307.0/1303.0/1306.1 against
// 1316.8/1316.4/1313.7, T = 6144 (192) 1415.6/1420.5/1419.4 against 1405.1/1406.6/1407.4 (the
// experts past 176 tokens take a second unit), T = 7168 (224) and 8192 (256) level to 1.5%
// slower, T = 16384 level.
inline constexpr double kPrefillFourWarpgroupsN128MaxTokensNarrow = 128;
inline constexpr double kPrefillNarrowFc2N176MinTokens = 104;
inline constexpr double kPrefillNarrowFc2N176MaxTokens = 184;

// Within that band, wide experts' GEMMs whose rows the 192-row blocks fit (glm5's FC1 and FC2,
// not glm5-tp8's) take the three-warpgroup 192 x 176 tile with 128 K a stage from
// kPrefillThreeWarpgroupsMinTokens: the 256 x 128 tile was measured against that tile's 64-K form,
// and the 128-K form with its width chosen once per unit has since overtaken it at the top of the
// band. Both GEMMs forced, three rounds in one call (H200, glm5, per GEMM in plain launches,
// 256 x 128 against 192 x 176, us): mean 56 (T = 1792) FC1 1905-1966 against 1891-1969, FC2
// 1069-1107 against 1101-1144; 64 FC1 2067-2068 against 2037-2056, FC2 1157-1164 against
// 1191-1201; 72 FC1 2158-2181 against 2151-2173, FC2 1220-1231 against 1267-1278; 80 FC1
// 2264-2305 against 2209-2262, FC2 1284-1292 against 1306-1335; 96 FC1 2598-2610 against
// 2400-2427, FC2 1467-1471 against 1435-1446. With 192 x 176 for FC1 alone at 80 (T = 2560), two
// rounds in another call: FC1 2233/2234 against 2306/2353, but FC2 (the same 256 x 128 tile in
// both) 1345/1345 against 1305/1322 and the layer in the CUDA graph 3698/3767 against 3534/3656
// - not taken; at 96 (T = 3072, both GEMMs on it) the layer 3967/4095 against 4115/4151.
inline constexpr double kPrefillThreeWarpgroupsMinTokens = 96;

// From kPrefillFourWarpgroupsN128MaxTokens up to kPrefillThreeWarpgroupsN144MaxTokens (not
// included) the 192-row tile with 144 tokens (m192n144:s7:w16) where the 192-row tiles' rows fit:
// its 72 accumulators leave room for two buffers of A fragments (the 176-token tile has one and
// retires each stage's wgmma before dequantizing the next), but an expert past 144 tokens takes a
// second unit. Both GEMMs forced against the dispatched 192 x 176 tile, three rounds in one call
// (H200, glm5, layer us): T = 3328 (mean 104) 4798.5/4748.3/4618.7 against 4977.9/5002.0/4885.6,
// T = 3584 (112) 5152.3/5073.5/5074.1 against 5027.6/5175.8/5207.7, T = 3840 (120) 2.6% and
// T = 4096 (128) 2.6% slower, T = 4352 4.5%, T = 2560 (80) 4-15% slower than the 256 x 128 tile,
// T = 3072 (96) level with it.
inline constexpr double kPrefillThreeWarpgroupsN144MaxTokens = 112;

// Decode token tile, from mean = T * k / E: 8 up to kDecodeN8MaxMean, 16 up to kDecodeN16MaxMean
// (on GPUs of low bandwidth per SM 32 from kDecodeN32MinMeanLowBandwidth, below), else 64. Measured: the tuner's fastest tile on the H200 (glm5) was 8 at a mean of 4 and 16 at
// 8, 16 and 32; among the decode tiles 64 was fastest at 64 and 128 (where sm_90a runs the
// prefill family instead). The rule it replaced sized the tile to the expected busiest expert
// (mean + 2 sqrt(mean) + 1) and ran 7-12% slower at T = 128, 256 and 512.
inline constexpr double kDecodeN8MaxMean = 6;
inline constexpr double kDecodeN16MaxMean = 32;
// Where DRAM gives each SM fewer bytes a second (kPrefillLowBandwidthPerSmGbs) and there is no
// prefill family (sm_80, sm_120), wide experts take the 32-token tile from this mean up to
// kDecodeN16MaxMean: at 16-32 tokens an expert most experts need two 16-token tiles, each
// dequantizing the expert's weights once, and where the slower stream leaves the 16-token tile's
// weights time to spare that second pass costs more than the 32-token tile's fewer CTAs. The
// sm_80 device code (compute_80 PTX, JIT-compiled) on an H100, both GEMMs forced, two rounds in
// one process, glm5 layer us, m256n16k256:s2:w8 (the rule before) against m128n32k256:s3:w4:
// T = 256 (mean 8) 2120/2121 against 2664/2667, T = 384 (12) 2510/2512 against 2819/2707, T = 448
// (14) 2746/2745 against 2825/2805, T = 512 (16) 3192/3193 against 2900/2916, T = 768 (24)
// 4426/4437 against 3600/3471, T = 1024 (32) 5646/5653 against 4704/4670 (the 64-token tile
// 4610/4635, level); docs/measurements/h100_sm80_code_decode_tiles.txt. On the H200 (sm_90a
// code) the 16-token tile led at a mean of 16 (docs/HEURISTIC.md), so the high-bandwidth GPUs
// (the B200 too) keep it. Narrow experts are unmeasured here and keep it as well.
inline constexpr double kDecodeN32MinMeanLowBandwidth = 16;
// The 8-token tile with 2 stages while at most one expert in eight holds a token (T <= 4 for
// E = 256, k = 8): 3 CTAs of 4 warps on an H200 SM instead of 2 of 8 (3 stages), 1.5x the
// stream-K ranges, each two thirds as long - at these sizes every CTA is a short chain of
// memory latencies. Both GEMMs forced, two rounds in one process (H200): glm5 T = 1 78.6/78.7 ->
// 75.0/74.7 us, T = 2 121.6/122.0 -> 115.9/116.2, T = 4 192.1/192.4 -> 192.2/191.7; glm5-tp8
// T = 1 38.5/38.5 -> 36.9/36.5, T = 2 41.8/41.7 -> 39.8/39.7, T = 4 49.8/50.3 -> 46.3/46.1.
// (At T = 16 it is 1% slower on glm5, 2.6% faster on glm5-tp8; the rule stops at 4.)
inline constexpr double kDecodeTwoStagesMaxMean = 0.125;
// ... and at every mean for narrow experts (narrow_experts: glm5-tp8's FC2 units are one K group
// each). Dispatched, two rounds in one process (H200), the 8-token
// tile with 2 stages against 3: glm5-tp8 T = 8 69.3/70.0 -> 66.6/66.7 us, T = 16 101.3/101.7 ->
// 98.4/98.4, T = 32 142.8/144.0 -> 141.2/141.1, T = 64 and 128 level; on glm5 (I = 2048) it was
// 0.5-1.6% slower at T = 8..64, hence the width.
// Above this mean the 8- and 16-token tiles take 256 weight rows, 8 warps and 2 stages where two
// such CTAs fit on an SM (as many warps as the 128-row tiles' 3-4 CTAs of 4, the same work per
// warp, half the units). Both GEMMs forced, two rounds in one process (H200), against the
// 128-row plan: glm5 T = 8 339.1/337.0 -> 330.7/330.0 us, T = 16 554.6/555.3 -> 547.0/546.4,
// T = 64 1229.5/1231.3 -> 1205.1/1202.7, T = 256 (16 tokens) 1676.3/1671.8 -> 1592.0/1594.2;
// glm5-tp8 T = 8 67.2/67.1 -> 66.3/66.4, T = 64 193.1/193.1 -> 189.7/189.6, T = 512 (16
// tokens) 387.5/386.2 -> 375.5/375.6. At T = 1 (glm5 75.2/74.5 -> 77.2/76.8) and glm5-tp8 T = 4
// (46.4/46.7 -> 47.7/47.8) it is slower: there the 2-stage rule's shorter stream-K ranges win.
inline constexpr double kDecodeWideRowsMinMean = kDecodeTwoStagesMaxMean;
// Narrow experts where DRAM gives each SM fewer bytes a second (kPrefillLowBandwidthPerSmGbs)
// keep the 128-row, 4-warp tile up to this mean: on an H100, glm5-tp8, both GEMMs forced, two
// rounds in one call, m128n8:s2:w4 against m256n8:s2:w8, layer us: T = 5 61.2/60.4 against
// 62.8/60.6, T = 6 63.9/64.0 against 66.4/66.0, T = 7 69.2/69.0 against 71.6/71.3, T = 8
// 78.6/78.6 against 80.6/80.1, T = 12 96.3/95.4 against 99.0/98.4, T = 16 118.0/118.0 against
// 121.3/121.5, T = 32 (mean 1) 173.1/173.1 against 174.4/175.0. Above it unmeasured there.
inline constexpr double kDecodeWideRowsMinMeanNarrowLowBandwidth = 1;
// The small-batch family (w4a16_gemv, both GEMMs: the routing in FC1's prologue, the slot sum in
// FC2's epilogue, two launches instead of four, no stream-K fix-ups) for narrow experts
// (narrow_experts) up to kGemvMaxTokensNarrow tokens, where its shared memory (the staged batch)
// fits. Measured on the H200, both GEMMs forced, two rounds in one process (docs/HEURISTIC.md):
// glm5-tp8 T = 1 24.5/24.5 us against 38.1/38.4 for the stream-K family's 8-token tile, T = 2
// 33.2/33.3 against 40.4/41.2, T = 3 39.4/39.3 against 42.9/42.6, T = 4 50.8/50.8 (48.3/48.0
// with 8 warps) against 46.0/47.3; on glm5 (I = 2048) it is slower at every T (T = 1 84.1 against
// 75.5 us): the stream-K family moves the weights by the copy engine, this family by every lane.
inline constexpr int64_t kGemvMaxTokensNarrow = 3;
// ... and up to 4 where DRAM gives each SM fewer bytes a second (kPrefillLowBandwidthPerSmGbs):
// on an H100 (seventy-first session) `fp4moe tune --preset glm5-tp8` ranked the family first at
// T = 4, and the bench with that cache against the heuristic's stream-K plan, two processes each
// in one call, read 47.8/47.7 us against 50.6/50.7; forced, two rounds, 48.6/48.4 (8 warps)
// against 51.0/51.5 for the stream-K 8-token tile, and at T = 5 62.8/62.7 against 60.2/60.4, so
// it stops at 4 (docs/HEURISTIC.md, "Narrow experts at T = 1-32 on an H100").
inline constexpr int64_t kGemvMaxTokensNarrowLowBandwidth = 4;
// Its tactic: one row tile per block, 6 warps with 2 K groups in flight each (three CTAs per SM:
// all of a single-token FC1's blocks resident at once); 8 warps from kGemvEightWarpsMinTokens
// tokens (48.3/48.0 against 50.8/50.8 us with 6 at glm5-tp8 T = 4 on the H200), from
// kGemvEightWarpsMinTokensLowBandwidth where each SM gets few bytes (the H100, glm5-tp8 T = 3:
// 38.8/38.6 against 40.2/40.1; T = 2 level, T = 1 26.2/26.1 against 25.0/25.2).
inline constexpr int64_t kGemvEightWarpsMinTokens = 4;
inline constexpr int64_t kGemvEightWarpsMinTokensLowBandwidth = 3;
Tactic gemv_tactic(int64_t tokens, const GpuSpec& gpu, Epilogue ep);
// The fused family (w4a16_fused: the whole layer in one persistent launch, work handed out as it
// runs; sm_90+) for wide experts up to kFusedMaxTokens tokens. Measured on the H200 (glm5, both
// GEMMs forced, layer us in the CUDA graph, two rounds in one call; docs/HEURISTIC.md): T = 1
// 64.2-64.4 (m128n8k1024) against 73.5-75.0 for the stream-K family's m128n8:s2:w4, T = 2
// 103.0-103.7 (m128n8k3072) against 105.8-106.6 (k2048, the rule before), T = 3 140.7-141.2
// (k3072) against 145.8-145.9, T = 4 178.5-178.8 (m128n8k6144) against 185.5-185.7; from T = 5 the
// stream-K family is ahead (226.8-227.5 against 229.9-230.2, at T = 8 320.8-321.4 against
// 333.8-335.3).
inline constexpr int64_t kFusedMaxTokens = 4;
// Its tactic at `tokens` tokens: 128 rows an item; a routed expert's FC1 item of 4 K groups at one
// token, 12 at two or three, 24 at four.
Tactic fused_tactic(int64_t tokens, Epilogue ep);
// The resource model's view of one GEMM of `cfg` at `tokens` tokens (FC1 for epilogue swiglu, FC2
// for finalize): the groups, and what the small-batch family stages (the batch, K and the slots
// per token); a batch beyond that family's tile makes its tactics not fit.
ModelOptions gemm_model_options(const MoeConfig& cfg, int64_t tokens, Epilogue ep);
// The mean routed tokens per expert from which a GEMM of `cfg` takes the prefill family on `gpu`
// (an sm_90a GPU; the rule above).
double prefill_min_tokens(const MoeConfig& cfg, const GpuSpec& gpu);
// The decode rule's token tile for a GEMM of `cfg` at `tokens` tokens on `gpu` (the rule above).
int heuristic_token_tile(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu);
// The tactic for one GEMM: the prefill family where the rule above takes it; otherwise the
// decode family's: token tile as above, 128 weight rows, 4 warps (8 for the 64-token tile),
// the compiled stages (2 up to kDecodeTwoStagesMaxMean or for narrow experts), 256 rows with 8
// warps for 8 and 16 tokens above kDecodeWideRowsMinMean where two CTAs of it fit; where
// the resource model says that does not fit on `gpu`, the fitting compiled tactic with the
// largest token tile not above it (then most rows, then most warps).
// (The family schedules stream-K over all resident CTAs, so no split-K factor is chosen.)
Tactic heuristic_tactic(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu, Epilogue ep);
// Both GEMMs: the fused family's pair where it applies (sm_90, wide experts, T <= 4, at most 256
// experts), else the small-batch family's (above), else heuristic_tactic's.
LayerPlan heuristic_plan(const MoeConfig& cfg, int64_t tokens, const GpuSpec& gpu);

}  // namespace fp4moe
