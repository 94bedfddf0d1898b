// cuBLAS and NCCL are opened at run time (bench/cublas_api.h, dist/nccl_api.h): a symbol renamed
// by a new release, or misspelled here, would otherwise show only when a GPU bench or a
// multi-GPU run first needs it. Opening a library and finding its symbols needs no GPU, so
// these run wherever the toolkit's libraries are (CI included) and skip where they are not.
#include <cublas_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "bench/cublas_api.h"
#ifdef FP4MOE_TEST_NCCL
#include "dist/nccl_api.h"
#endif

namespace fp4moe {
namespace {

// The toolkit's copy of `name`, where it exists, set as the library the loader opens (the
// toolkit's lib64 is often not on the loader's path).
bool use_toolkit_library(const char* env, const std::string& name) {
  const std::string file = std::string(FP4MOE_CUDA_LIBRARY_DIR) + "/" + name;
  if (!std::filesystem::exists(file)) return false;
  setenv(env, file.c_str(), 1);
  return true;
}

TEST(RuntimeApis, CublasEntryPointsResolve) {
  if (!use_toolkit_library("FP4MOE_CUBLAS_LIBRARY", "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR)))
    GTEST_SKIP() << "no libcublas.so." << CUBLAS_VER_MAJOR << " in " << FP4MOE_CUDA_LIBRARY_DIR;
  const CublasApi& a = CublasApi::get();
  EXPECT_TRUE(a.create && a.destroy && a.set_stream && a.gemm_ex);
  // Optional only for libraries older than 12.5; the toolkit built against has it.
  EXPECT_NE(a.gemm_grouped_batched_ex, nullptr);
}

#ifdef FP4MOE_TEST_NCCL
TEST(RuntimeApis, NcclEntryPointsResolve) {
  if (!use_toolkit_library("FP4MOE_NCCL_LIBRARY", "libnccl.so.2"))
    GTEST_SKIP() << "no libnccl.so.2 in " << FP4MOE_CUDA_LIBRARY_DIR;
  const NcclApi& n = NcclApi::get();
  EXPECT_TRUE(n.get_unique_id && n.comm_init_rank && n.comm_init_all && n.comm_destroy && n.comm_count &&
              n.comm_user_rank && n.comm_cu_device && n.comm_get_async_error && n.all_reduce && n.all_gather &&
              n.send && n.recv && n.group_start && n.group_end && n.error_string);
  EXPECT_STREQ(n.error_string(ncclSuccess), "no error");
}
#endif

}  // namespace
}  // namespace fp4moe
