#include "dist/nccl_api.h"

#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "common/runtime_library.h"
#include "kernels/common/cuda_check.h"

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
    lib.bind(api.comm_count, "ncclCommCount");
    lib.bind(api.comm_user_rank, "ncclCommUserRank");
    lib.bind(api.comm_cu_device, "ncclCommCuDevice");
    lib.bind(api.comm_get_async_error, "ncclCommGetAsyncError");
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

void synchronize_with_nccl(cudaStream_t stream, ncclComm_t comm) {
  const NcclApi& nccl = NcclApi::get();
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    FP4MOE_CUDA_CHECK(q == cudaErrorNotReady ? cudaSuccess : q);
    ncclResult_t async = ncclSuccess;
    FP4MOE_NCCL_CHECK(nccl.comm_get_async_error(comm, &async));
    FP4MOE_CHECK(async == ncclSuccess || async == ncclInProgress, "NCCL: the communicator failed while this rank "
                 "waited for it (", nccl.error_string(async), "); abort it (ncclCommAbort) on every rank");
    std::this_thread::yield();  // spins, as cudaStreamSynchronize does by default: no wake-up latency
  }
}

}  // namespace fp4moe
