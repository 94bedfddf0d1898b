// The run-target rules against CUDA's binary compatibility (CUDA C++ Programming Guide, "Binary
// Compatibility"; the arch-specific and family-specific targets of CUDA 12.0 and 12.9), and the
// answer for every GPU of the table.
#include <gtest/gtest.h>

#include <string>

#include "fp4moe/error.h"
#include "fp4moe/hw.h"

namespace fp4moe {
namespace {

TEST(RunTargets, TheTargetMadeForEachComputeCapability) {
  EXPECT_EQ(run_target_for(80), "80");
  EXPECT_EQ(run_target_for(86), "86");
  EXPECT_EQ(run_target_for(89), "89");
  EXPECT_EQ(run_target_for(90), "90a");
  EXPECT_EQ(run_target_for(100), "100a");
  EXPECT_EQ(run_target_for(103), "103a");
  EXPECT_EQ(run_target_for(120), "120a");
  EXPECT_EQ(run_target_for(121), "121a");
  EXPECT_THROW(run_target_for(8), Error);
}

TEST(RunTargets, PlainMachineCodeRunsOnItsMajorVersionFromItsMinorOn) {
  EXPECT_TRUE(run_target_runs_on("80", 80));
  EXPECT_TRUE(run_target_runs_on("80", 86));
  EXPECT_TRUE(run_target_runs_on("80", 89));
  EXPECT_FALSE(run_target_runs_on("86", 80));
  EXPECT_FALSE(run_target_runs_on("80", 90));  // another major version: no
  EXPECT_FALSE(run_target_runs_on("80", 120));
  EXPECT_TRUE(run_target_runs_on("120", 121));
  EXPECT_FALSE(run_target_runs_on("90", 100));
}

TEST(RunTargets, ArchSpecificMachineCodeRunsOnItsOwnVersionAlone) {
  EXPECT_TRUE(run_target_runs_on("90a", 90));
  EXPECT_TRUE(run_target_runs_on("100a", 100));
  EXPECT_FALSE(run_target_runs_on("100a", 103));
  EXPECT_TRUE(run_target_runs_on("120a", 120));
  EXPECT_FALSE(run_target_runs_on("120a", 121));
  EXPECT_FALSE(run_target_runs_on("90a", 100));
}

TEST(RunTargets, FamilySpecificMachineCodeRunsOnItsFamily) {
  EXPECT_TRUE(run_target_runs_on("100f", 100));
  EXPECT_TRUE(run_target_runs_on("100f", 103));
  EXPECT_FALSE(run_target_runs_on("103f", 100));
  EXPECT_TRUE(run_target_runs_on("120f", 121));
  EXPECT_FALSE(run_target_runs_on("100f", 120));
}

TEST(RunTargets, PtxRunsOnEveryLaterGpuButArchSpecificPtxOnItsOwn) {
  EXPECT_TRUE(run_target_runs_on("80-virtual", 80));
  EXPECT_TRUE(run_target_runs_on("80-virtual", 90));
  EXPECT_TRUE(run_target_runs_on("80-virtual", 120));
  EXPECT_FALSE(run_target_runs_on("86-virtual", 80));
  EXPECT_TRUE(run_target_runs_on("90a-virtual", 90));
  EXPECT_FALSE(run_target_runs_on("90a-virtual", 100));
  EXPECT_TRUE(run_target_runs_on("100f-virtual", 103));
  EXPECT_FALSE(run_target_runs_on("100f-virtual", 120));
}

TEST(RunTargets, StringsThatAreNoTargetRunNowhere) {
  for (const char* s : {"", "a", "9", "9a", "1000", "90b", "90aa", "sm_90a", "compute_90", " 90", "90 ", "-virtual",
                        "80-virtual-virtual", "80virtual", "80-Virtual"})
    EXPECT_FALSE(run_target_runs_on(s, 90)) << "'" << s << "'";
}

// The target a GPU is told to build runs on it, and the default build's targets run on the GPUs
// of the table they are meant for, not on Blackwell: the case the message is for.
TEST(RunTargets, EveryListedGpuRunsTheTargetMadeForIt) {
  for (const GpuSpec& g : known_gpus()) {
    EXPECT_TRUE(run_target_runs_on(run_target_for(g.sm), g.sm)) << g.name;
    const bool default_build_runs = run_target_runs_on("80", g.sm) || run_target_runs_on("90a", g.sm);
    EXPECT_EQ(default_build_runs, g.sm < 100) << g.name << " (" << g.arch_name() << ")";
  }
}

}  // namespace
}  // namespace fp4moe
