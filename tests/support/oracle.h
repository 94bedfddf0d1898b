// Test support: calls tests/oracle/fp_oracle.py (NumPy + ml_dtypes), the independent
// implementation the format tests compare with element for element.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fp4moe::test {

// This test process's scratch directory, removed with everything in it when the process exits
// (ctest runs each test in a process of its own: without the removal every run left hundreds of
// directories of checkpoints behind). A forked child leaves by _exit and removes nothing.
inline std::filesystem::path temp_dir() {
  struct Scratch {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("fp4moe_test_" + std::to_string(::getpid()));
    ~Scratch() {
      std::error_code ignored;  // a failed clean-up must not turn a passing test into a crash
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Scratch scratch;
  std::filesystem::create_directories(scratch.path);
  return scratch.path;
}

// Runs the oracle on float32 input and returns its raw output bytes. A missing Python or
// ml_dtypes is a test failure (scripts/install_deps.sh installs them), never a silent skip.
inline std::vector<uint8_t> run_oracle(const std::string& op, const std::vector<float>& in,
                                       const std::string& extra_args = "") {
  static int counter = 0;
  const auto dir = temp_dir();
  const auto src = dir / ("in" + std::to_string(counter) + ".bin");
  const auto dst = dir / ("out" + std::to_string(counter++) + ".bin");
  {
    std::ofstream f(src, std::ios::binary);
    f.write(reinterpret_cast<const char*>(in.data()), static_cast<std::streamsize>(in.size() * 4));
  }
  // Paths quoted for the shell (a checkout under "My Projects" split into two words); extra_args
  // are the caller's literal options.
  const auto quoted = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  const std::string cmd = quoted(FP4MOE_PYTHON) + " " + quoted(std::string(FP4MOE_SOURCE_DIR) + "/tests/oracle/fp_oracle.py") +
                          " " + op + " " + quoted(src.string()) + " " + quoted(dst.string()) + " " + extra_args;
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << "oracle failed: " << cmd;
  std::ifstream f(dst, std::ios::binary);
  std::vector<uint8_t> out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::filesystem::remove(src);
  std::filesystem::remove(dst);
  return out;
}

}  // namespace fp4moe::test
