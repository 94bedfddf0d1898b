// .npy: round trips, and NumPy reading our files and us reading NumPy's.
#include <gtest/gtest.h>

#include <filesystem>

#include "fp4moe/error.h"
#include "io/npy.h"
#include "support/oracle.h"

namespace fp4moe {
namespace {

TEST(Npy, RoundTripAndNumpyInterop) {
  const auto dir = test::temp_dir();
  const std::string ours = (dir / "ours.npy").string(), theirs = (dir / "theirs.npy").string();
  std::vector<float> v(6 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 3;
  write_npy(ours, npy_from_float(v, {6, 5}));
  const NpyArray back = read_npy(ours);
  EXPECT_EQ(back.shape, (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(npy_to_float(back, "x"), v);
  // NumPy reads ours and writes a float64 transpose-free copy that we read back.
  const std::string cmd = std::string(FP4MOE_PYTHON) + " -c \"import numpy as np; a=np.load('" +
                          ours + "'); assert a.shape==(6,5) and a.dtype==np.float32; np.save('" +
                          theirs + "', a.astype(np.float64) * 2)\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const NpyArray t = read_npy(theirs);
  EXPECT_EQ(t.descr, "<f8");
  const std::vector<float> tv = npy_to_float(t, "theirs");
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(tv[i], 2 * v[i]);
  std::filesystem::remove(ours);
  std::filesystem::remove(theirs);
}

TEST(Npy, ClearErrorsForBadFiles) {
  const auto dir = test::temp_dir();
  EXPECT_THROW(read_npy((dir / "missing.npy").string()), Error);
  const std::string p = (dir / "bad.npy").string();
  write_npy(p, npy_from_float(std::vector<float>(100, 1.0f), {100}));
  std::filesystem::resize_file(p, 200);  // truncate the data
  try {
    read_npy(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  {
    std::ofstream f(p, std::ios::binary);
    f << "not numpy at all";
  }
  EXPECT_THROW(read_npy(p), Error);
  std::filesystem::remove(p);
}

}  // namespace
}  // namespace fp4moe
