#include "common/runtime_library.h"

#include <gtest/gtest.h>

#include <cstddef>

namespace fp4moe {
namespace {

TEST(RuntimeLibrary, BindsWhatIsThereAndNamesTheFirstSymbolThatIsNot) {
  RuntimeLibrary libc("libc", "libc.so.6");
  ASSERT_TRUE(libc.ok()) << libc.failure();
  size_t (*length)(const char*) = nullptr;
  libc.bind(length, "strlen");
  ASSERT_NE(length, nullptr);
  EXPECT_EQ(length("fp4moe"), 6u);
  EXPECT_TRUE(libc.ok());
  void (*optional)() = reinterpret_cast<void (*)()>(1);
  libc.bind_optional(optional, "fp4moe_no_such_symbol");  // a later version's symbol: no failure
  EXPECT_EQ(optional, nullptr);
  EXPECT_TRUE(libc.ok());
  void (*missing)() = nullptr;
  libc.bind(missing, "fp4moe_no_such_symbol");
  EXPECT_EQ(missing, nullptr);
  EXPECT_EQ(libc.failure(), "libc library libc.so.6 has no symbol fp4moe_no_such_symbol");
  libc.bind(missing, "fp4moe_another_missing_one");
  EXPECT_EQ(libc.failure(), "libc library libc.so.6 has no symbol fp4moe_no_such_symbol");  // the first
}

TEST(RuntimeLibrary, AFileThatIsNotThereIsAFailureAndBindsNothing) {
  RuntimeLibrary lib("NCCL", "/nonexistent/libnccl.so.2");
  EXPECT_FALSE(lib.ok());
  EXPECT_EQ(lib.failure().rfind("cannot load NCCL (/nonexistent/libnccl.so.2): ", 0), 0u) << lib.failure();
  int (*fn)() = reinterpret_cast<int (*)()>(1);
  lib.bind(fn, "ncclGetUniqueId");
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(lib.failure().rfind("cannot load NCCL", 0), 0u);
}

}  // namespace
}  // namespace fp4moe
