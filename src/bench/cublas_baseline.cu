// cuBLAS BF16 baseline (see cublas_baseline.h).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <vector>

#include "bench/cublas_baseline.h"
#include "bench/cublas_api.h"
#include "bench/cublas_check.h"
#include "fp4moe/error.h"
#include "kernels/moe/weight_prep.h"
#include "runtime/device_buffer.h"

namespace fp4moe {
namespace {

__global__ void gather_rows(const __nv_bfloat16* hidden, const int* row_token, int64_t rows,
                            int64_t h, __nv_bfloat16* x) {
  const int64_t vecs = h / 8;  // 16-byte vectors
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * vecs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / vecs, v = i % vecs;
    reinterpret_cast<uint4*>(x)[r * vecs + v] =
        reinterpret_cast<const uint4*>(hidden)[row_token[r] * vecs + v];
  }
}

__global__ void swiglu(const __nv_bfloat16* y, int64_t rows, int64_t inter, __nv_bfloat16* act) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * inter;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / inter, j = i % inter;
    const float g = __bfloat162float(y[r * 2 * inter + j]);
    const float u = __bfloat162float(y[r * 2 * inter + inter + j]);
    act[i] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
  }
}

__global__ void finalize(const __nv_bfloat16* y, const int* pair_row, const float* row_weight,
                         int64_t tokens, int slots, int64_t h, __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < tokens * h;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / h, c = i % h;
    float acc = 0.0f;
    for (int s = 0; s < slots; ++s) {
      const int r = pair_row[t * slots + s];
      acc += row_weight[r] * __bfloat162float(y[r * h + c]);
    }
    out[i] = __float2bfloat16(acc);
  }
}

int grid(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096)); }

}  // namespace

const char* to_string(CublasBaseline::Method m) {
  return m == CublasBaseline::Method::kGrouped ? "cublasGemmGroupedBatchedEx" : "cublasGemmEx per expert";
}

struct CublasBaseline::Impl {
  MoeConfig cfg;
  int groups = 0, slots = 0;
  int64_t H = 0, I = 0;
  DeviceBuffer w13, w2;  // [group][2I][H], [group][H][I] bf16
  cublasHandle_t handle = nullptr;
  bool grouped_ok = true;
  // prepared routing
  int64_t tokens = 0, rows = 0;
  DeviceBuffer row_token, pair_row, row_weight, x, y1, act, y2;
  std::vector<int> active, offsets, counts;  // active groups, their row offsets and sizes
  DeviceBuffer ptrs;                          // device pointer arrays: A1 B1 C1 A2 B2 C2
};

CublasBaseline::CublasBaseline(const MoeWeights& w) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = w.config;
  m.H = w.config.hidden;
  m.I = w.config.intermediate;
  m.groups = w.config.num_experts + (w.config.has_shared_expert() ? 1 : 0);
  m.slots = w.config.routing.top_k + (w.config.has_shared_expert() ? 1 : 0);
  FP4MOE_CHECK(!w.config.has_shared_expert() || w.config.shared_intermediate == m.I,
               "baseline: the shared expert's width must equal I");
  m.w13.resize(static_cast<size_t>(m.groups) * 2 * m.I * m.H * 2);
  m.w2.resize(static_cast<size_t>(m.groups) * m.H * m.I * 2);
  DeviceBuffer codes(m.I * m.H / 2), scales(m.I * m.H / 16);
  for (int gi = 0; gi < m.groups; ++gi) {
    const ExpertWeights& e = gi < w.config.num_experts ? w.experts[gi] : *w.shared;
    FP4MOE_CHECK(e.materialized(), "baseline: expert ", gi, " is not materialised");
    const Nvfp4Matrix* mats[3] = {&e.gate, &e.up, &e.down};
    uint16_t* dst[3] = {m.w13.get<uint16_t>() + gi * 2 * m.I * m.H,
                        m.w13.get<uint16_t>() + gi * 2 * m.I * m.H + m.I * m.H,
                        m.w2.get<uint16_t>() + gi * m.H * m.I};
    for (int i = 0; i < 3; ++i) {
      FP4MOE_CUDA_CHECK(cudaMemcpy(codes.get(), mats[i]->data.data(), mats[i]->data.size(), cudaMemcpyHostToDevice));
      FP4MOE_CUDA_CHECK(cudaMemcpy(scales.get(), mats[i]->block_scales.data(), mats[i]->block_scales.size(),
                                   cudaMemcpyHostToDevice));
      kernels::launch_dequant_bf16({codes.get<uint8_t>(), scales.get<uint8_t>()}, mats[i]->rows,
                                   mats[i]->cols, mats[i]->global_scale, dst[i], nullptr);
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    }
  }
  FP4MOE_CUBLAS_CHECK(CublasApi::get().create(&m.handle));
}

CublasBaseline::~CublasBaseline() {
  if (impl_->handle) CublasApi::get().destroy(impl_->handle);
}

bool CublasBaseline::grouped_available() const { return impl_->grouped_ok; }

double CublasBaseline::bf16_weight_bytes() const {
  return static_cast<double>(impl_->w13.bytes() + impl_->w2.bytes());
}

void CublasBaseline::prepare(const Routing& r) {
  Impl& m = *impl_;
  const int E = m.cfg.num_experts, k = r.top_k;
  m.tokens = r.tokens;
  m.rows = r.tokens * m.slots;
  m.counts.assign(m.groups, 0);
  for (int32_t e : r.ids) ++m.counts[e];
  if (m.cfg.has_shared_expert()) m.counts[E] = static_cast<int>(r.tokens);
  std::vector<int> start(m.groups + 1, 0);
  for (int g = 0; g < m.groups; ++g) start[g + 1] = start[g] + m.counts[g];
  std::vector<int> fill = start, row_token(m.rows), pair_row(m.rows);
  std::vector<float> row_weight(m.rows);
  for (int64_t t = 0; t < r.tokens; ++t)
    for (int s = 0; s < m.slots; ++s) {
      const int e = s < k ? r.ids[t * k + s] : E;
      const int row = fill[e]++;
      row_token[row] = static_cast<int>(t);
      row_weight[row] = s < k ? r.weights[t * k + s] : 1.0f;
      pair_row[t * m.slots + s] = row;
    }
  auto upload = [](DeviceBuffer& b, const auto& v) {
    b.resize(v.size() * sizeof(v[0]));
    FP4MOE_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(v[0]), cudaMemcpyHostToDevice));
  };
  upload(m.row_token, row_token);
  upload(m.pair_row, pair_row);
  upload(m.row_weight, row_weight);
  m.x.resize(m.rows * m.H * 2);
  m.y1.resize(m.rows * 2 * m.I * 2);
  m.act.resize(m.rows * m.I * 2);
  m.y2.resize(m.rows * m.H * 2);
  m.active.clear();
  m.offsets.clear();
  for (int g = 0; g < m.groups; ++g)
    if (m.counts[g] > 0) {
      m.active.push_back(g);
      m.offsets.push_back(start[g]);
    }
  const size_t na = m.active.size();
  std::vector<const void*> p(6 * na);
  for (size_t i = 0; i < na; ++i) {
    const int g = m.active[i];
    const int64_t off = m.offsets[i];
    p[0 * na + i] = m.w13.get<uint16_t>() + g * 2 * m.I * m.H;
    p[1 * na + i] = m.x.get<uint16_t>() + off * m.H;
    p[2 * na + i] = m.y1.get<uint16_t>() + off * 2 * m.I;
    p[3 * na + i] = m.w2.get<uint16_t>() + g * m.H * m.I;
    p[4 * na + i] = m.act.get<uint16_t>() + off * m.I;
    p[5 * na + i] = m.y2.get<uint16_t>() + off * m.H;
  }
  upload(m.ptrs, p);
}

void CublasBaseline::forward(const uint16_t* hidden, uint16_t* out, cudaStream_t stream, Method method) {
  Impl& m = *impl_;
  FP4MOE_CHECK(m.rows > 0, "baseline: prepare() first");
  const CublasApi& cublas = CublasApi::get();
  FP4MOE_CUBLAS_CHECK(cublas.set_stream(m.handle, stream));
  gather_rows<<<grid(m.rows * m.H / 8), 256, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(hidden), m.row_token.get<int>(), m.rows, m.H,
      m.x.get<__nv_bfloat16>());
  FP4MOE_CUDA_CHECK_LAUNCH();
  const int na = static_cast<int>(m.active.size());
  const void* const* dp = m.ptrs.get<const void*>();
  // Row-major Y[n, N] = X[n, K] . W[N, K]^T is column-major Y^T = W^T(op T) . X^T:
  // gemm(T, N, m = N, n = n_rows, k = K, A = W (lda K), B = X (ldb K), C = Y (ldc N)).
  auto gemms = [&](int which, int64_t n_out, int64_t kdim) {
    const void* const* A = dp + (which * 3 + 0) * na;
    const void* const* B = dp + (which * 3 + 1) * na;
    void* const* C = const_cast<void* const*>(dp + (which * 3 + 2) * na);
    if (method == Method::kGrouped) {
      std::vector<cublasOperation_t> ta(na, CUBLAS_OP_T), tb(na, CUBLAS_OP_N);
      std::vector<int> mm(na, static_cast<int>(n_out)), nn(na), kk(na, static_cast<int>(kdim)),
          lda(na, static_cast<int>(kdim)), ldb(na, static_cast<int>(kdim)),
          ldc(na, static_cast<int>(n_out)), gs(na, 1);
      std::vector<float> alpha(na, 1.0f), beta(na, 0.0f);
      for (int i = 0; i < na; ++i) nn[i] = m.counts[m.active[i]];
      if (!cublas.gemm_grouped_batched_ex) m.grouped_ok = false;
      FP4MOE_CHECK(cublas.gemm_grouped_batched_ex, "cublasGemmGroupedBatchedEx: not in this cuBLAS (12.5+)");
      const cublasStatus_t st = cublas.gemm_grouped_batched_ex(
          m.handle, ta.data(), tb.data(), mm.data(), nn.data(), kk.data(), alpha.data(), A,
          CUDA_R_16BF, lda.data(), B, CUDA_R_16BF, ldb.data(), beta.data(), C, CUDA_R_16BF,
          ldc.data(), na, gs.data(), CUBLAS_COMPUTE_32F);
      if (st == CUBLAS_STATUS_NOT_SUPPORTED) m.grouped_ok = false;
      FP4MOE_CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasGemmGroupedBatchedEx failed: status ",
                   static_cast<int>(st));
    } else {
      // Host copies of the pointer arrays: one cublasGemmEx per active group.
      for (int i = 0; i < na; ++i) {
        const int g = m.active[i];
        const int64_t off = m.offsets[i];
        const float alpha = 1.0f, beta = 0.0f;
        const void* a = which == 0 ? static_cast<const void*>(m.w13.get<uint16_t>() + g * 2 * m.I * m.H)
                                   : static_cast<const void*>(m.w2.get<uint16_t>() + g * m.H * m.I);
        const void* b = which == 0 ? static_cast<const void*>(m.x.get<uint16_t>() + off * m.H)
                                   : static_cast<const void*>(m.act.get<uint16_t>() + off * m.I);
        void* c = which == 0 ? static_cast<void*>(m.y1.get<uint16_t>() + off * 2 * m.I)
                             : static_cast<void*>(m.y2.get<uint16_t>() + off * m.H);
        FP4MOE_CUBLAS_CHECK(cublas.gemm_ex(m.handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_out),
                                         m.counts[g], static_cast<int>(kdim), &alpha, a, CUDA_R_16BF,
                                         static_cast<int>(kdim), b, CUDA_R_16BF, static_cast<int>(kdim),
                                         &beta, c, CUDA_R_16BF, static_cast<int>(n_out),
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      }
    }
  };
  gemms(0, 2 * m.I, m.H);
  swiglu<<<grid(m.rows * m.I), 256, 0, stream>>>(m.y1.get<__nv_bfloat16>(), m.rows, m.I,
                                                 m.act.get<__nv_bfloat16>());
  FP4MOE_CUDA_CHECK_LAUNCH();
  gemms(1, m.H, m.I);
  finalize<<<grid(m.tokens * m.H), 256, 0, stream>>>(m.y2.get<__nv_bfloat16>(), m.pair_row.get<int>(),
                                                     m.row_weight.get<float>(), m.tokens, m.slots, m.H,
                                                     reinterpret_cast<__nv_bfloat16*>(out));
  FP4MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace fp4moe
