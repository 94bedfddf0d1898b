// Tactic text form: round trips for every listed tactic, and clear errors for bad text.
#include <gtest/gtest.h>

#include <set>

#include "fp4moe/error.h"
#include "fp4moe/resource_model.h"
#include "fp4moe/tactic.h"

namespace fp4moe {
namespace {

TEST(Tactic, FormatParseRoundTripsEveryListedTactic) {
  int n = 0;
  std::set<Family> families_listed;
  for (Family f : {Family::kW4a16Mma, Family::kW4a16Wgmma, Family::kCutlassSm120, Family::kCutlassSm100,
                   Family::kW4a16Gemv, Family::kW4a16Fused})
    for (Epilogue e : {Epilogue::kNone, Epilogue::kSwiglu, Epilogue::kFinalize})
      for (const Tactic& t : listed_tactics(f, e)) {
        EXPECT_EQ(t.family, f) << format_tactic(t);
        EXPECT_EQ(parse_tactic(format_tactic(t)), t) << format_tactic(t);
        EXPECT_EQ(decode_tactic(encode_tactic(t)), t) << format_tactic(t);
        families_listed.insert(f);
        ++n;
      }
  EXPECT_EQ(families_listed.size(), 6u);  // every family has listed tactics, each round-tripped
  EXPECT_GT(n, 40);
  EXPECT_EQ(format_tactic(Tactic{Family::kW4a16Mma, 128, 32, 256, 4, 4, 2, Epilogue::kFinalize, false}),
            "w4a16_mma:m128n32k256:s4:w4:sk2:finalize");
  EXPECT_EQ(format_tactic(Tactic{Family::kCutlassSm120, 128, 256, 128, 0, 0, 1, Epilogue::kNone, true}),
            "cutlass_sm120:m128n256k128:sauto:w0:sk1:none:swapab");
}

TEST(Tactic, BadTextIsAClearError) {
  for (const char* bad : {"", "w4a16_mma", "nope:m1n1k1:s1:w1:sk1:none", "w4a16_mma:m128k256:s4:w4:sk1:none",
                          "w4a16_mma:m128n32k256:s4:w4:sk1:fused", "w4a16_mma:mXn32k256:s4:w4:sk1:none",
                          "w4a16_mma:m128n32k256:s4:w4:sk1:none:swap", "w4a16_mma:m0n32k256:s4:w4:sk1:none",
                          // no warps for our own family (the resource model would divide by 0),
                          // K not in whole blocks, and fields wider than encode_tactic packs
                          "w4a16_mma:m128n16k256:s4:w0:sk1:finalize", "w4a16_mma:m7n3k17:s2:w4:sk1:none",
                          "w4a16_mma:m4096n8k256:s2:w4:sk1:none", "w4a16_mma:m128n1024k256:s2:w4:sk1:none",
                          "w4a16_mma:m128n8k256:s64:w4:sk1:none", "w4a16_mma:m128n8k256:s2:w4:sk256:none"}) {
    EXPECT_THROW(parse_tactic(bad), Error) << bad;
  }
  try {
    parse_tactic("w4a16_mma:m128n32k256:s4:w4:sk1:fused");
    ADD_FAILURE() << "an unknown epilogue was parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown epilogue 'fused'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4moe
