#include "dist/nccl_api.h"

#include <cstdlib>
#include <mutex>
#include <string>

#include "common/runtime_library.h"

namespace fp4moe {

const NcclApi& NcclApi::get() {
  static NcclApi api;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("FP4MOE_NCCL_LIBRARY");
    RuntimeLibrary lib("NCCL", env && *env ? env : "libnccl.so.2");
    lib.bind(api.get_unique_id, "ncclGetUniqueId");
    lib.bind(api.comm_init_rank, "ncclCommInitRank");
    lib.bind(api.comm_init_all, "ncclCommInitAll");
    lib.bind(api.comm_destroy, "ncclCommDestroy");
    lib.bind(api.all_reduce, "ncclAllReduce");
    lib.bind(api.all_gather, "ncclAllGather");
    lib.bind(api.send, "ncclSend");
    lib.bind(api.recv, "ncclRecv");
    lib.bind(api.group_start, "ncclGroupStart");
    lib.bind(api.group_end, "ncclGroupEnd");
    lib.bind(api.error_string, "ncclGetErrorString");
    failure = lib.failure();
    if (!failure.empty())
      failure += "; set FP4MOE_NCCL_LIBRARY to libnccl.so.2 or add its directory to LD_LIBRARY_PATH";
  });
  FP4MOE_CHECK(failure.empty(), failure);
  return api;
}

}  // namespace fp4moe
