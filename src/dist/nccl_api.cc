#include "dist/nccl_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace fp4moe {

const NcclApi& NcclApi::get() {
  static NcclApi api;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("FP4MOE_NCCL_LIBRARY");
    const std::string name = env && *env ? env : "libnccl.so.2";
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* why = dlerror();
      failure = "cannot load NCCL (" + name + "): " + (why ? why : "unknown error") +
                "; set FP4MOE_NCCL_LIBRARY to libnccl.so.2 or add its directory to LD_LIBRARY_PATH";
      return;
    }
    auto sym = [&](auto& fn, const char* s) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, s));
      if (!fn && failure.empty()) failure = std::string("NCCL library ") + name + " has no symbol " + s;
    };
    sym(api.get_unique_id, "ncclGetUniqueId");
    sym(api.comm_init_rank, "ncclCommInitRank");
    sym(api.comm_init_all, "ncclCommInitAll");
    sym(api.comm_destroy, "ncclCommDestroy");
    sym(api.all_reduce, "ncclAllReduce");
    sym(api.all_gather, "ncclAllGather");
    sym(api.send, "ncclSend");
    sym(api.recv, "ncclRecv");
    sym(api.group_start, "ncclGroupStart");
    sym(api.group_end, "ncclGroupEnd");
    sym(api.error_string, "ncclGetErrorString");
  });
  FP4MOE_CHECK(failure.empty(), failure);
  return api;
}

}  // namespace fp4moe
