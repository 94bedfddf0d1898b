// NCCL, loaded at run time (dlopen): the multi-GPU paths need it, nothing else does, so the tool
// and the library start on machines without it. The library is FP4MOE_NCCL_LIBRARY when set,
// else libnccl.so.2 on the loader's search path (a CUDA toolkit's, or the one a PyTorch wheel
// ships: add its nvidia/nccl/lib to LD_LIBRARY_PATH).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include "fp4moe/error.h"

namespace fp4moe {

struct NcclApi {
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_count)(const ncclComm_t, int*) = nullptr;
  ncclResult_t (*comm_user_rank)(const ncclComm_t, int*) = nullptr;
  ncclResult_t (*comm_cu_device)(const ncclComm_t, int*) = nullptr;
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;

  // Loads the library once; throws fp4moe::Error naming what was tried when it cannot.
  static const NcclApi& get();
};

// Waits for `stream` as cudaStreamSynchronize does, but also watches `comm` for the errors NCCL
// reports asynchronously (a network or transport failure): its kernels then never finish, and a
// plain synchronize would wait for ever; this throws an Error saying so, and the owner of `comm`
// must abort it. Not among those errors: a peer on this host that exited or threw (its ranks
// share memory, not a network) - this rank then waits for ever, and the multi-GPU bench's parent
// stops it.
void synchronize_with_nccl(cudaStream_t stream, ncclComm_t comm);

}  // namespace fp4moe

#define FP4MOE_NCCL_CHECK(call)                                                                    \
  do {                                                                                             \
    const ncclResult_t fp4moe_nccl_r = (call);                                                     \
    if (fp4moe_nccl_r != ncclSuccess)                                                              \
      FP4MOE_FAIL("NCCL: ", #call, " failed: ", ::fp4moe::NcclApi::get().error_string(fp4moe_nccl_r)); \
  } while (0)
