// The GPU runtime of the native transformer: context, stream, NVRTC module, cuBLASLt GEMMs, memory.
#include "libcommon/nn_cuda/gpu.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "libcommon/nn_cuda/kernels.hpp"

namespace ca::nn_cuda {

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "fp32" || s == "float32" || s == "float") return DType::F32;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  throw InputError("dtype '" + s + "' is not one of f32, bf16");
}

int parse_device(const std::string& spec, const std::string& option) {
  if (spec == "cpu") return -1;
  if (spec == "cuda") return 0;
  if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5 && spec.size() < 9 &&
      spec.find_first_not_of("0123456789", 5) == std::string::npos)
    return std::stoi(spec.substr(5));
  throw UsageError(option + ": expected cpu, cuda or cuda:N, got '" + spec + "'");
}

// Event pairs by kernel name; folded into totals (which syncs) every few thousand launches.
struct Gpu::Profile {
  struct Pending {
    std::string name;
    CUevent start, end;
  };
  std::vector<Pending> pending;
  std::vector<CUevent> spare;
  std::map<std::string, std::pair<double, long>> totals;  // ms, calls
  void fold(const cuda::Driver& drv) {
    for (auto& p : pending) {
      drv.check(drv.cuEventSynchronize(p.end), "cuEventSynchronize");
      float ms = 0.f;
      drv.check(drv.cuEventElapsedTime(&ms, p.start, p.end), "cuEventElapsedTime");
      auto& t = totals[p.name];
      t.first += ms;
      t.second += 1;
      spare.push_back(p.start);
      spare.push_back(p.end);
    }
    pending.clear();
  }
};

Gpu::Gpu(int ordinal) {
  drv_ = &cuda::Driver::get();
  if (ordinal < 0 || ordinal >= drv_->device_count)
    throw EnvironmentError("GPU " + std::to_string(ordinal) + " does not exist (" + std::to_string(drv_->device_count) +
                           " visible)");
  info_ = drv_->device_info(ordinal);
  ctx_ = drv_->primary_context(ordinal);
  check(drv_->cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  bundle::CompileOptions opt;
  opt.confined = false;  // the project's own kernels
  opt.arch = info_.arch();
  std::vector<std::string> names = kernel_names();
  bundle::CompileResult r = bundle::compile_bundle(kernel_sources(), names, opt);
  if (!r.ok) throw InternalError("native transformer kernels do not compile for " + opt.arch + ": " + r.first_error);
  log::verbose("nn_cuda: kernels ", r.cached ? "from the cubin cache" : "compiled", " (", r.compile_ms, " ms) for ", opt.arch);
  check(drv_->cuModuleLoadData(&module_, r.cubin.data()), "cuModuleLoadData(native transformer kernels)");
  for (auto& name : names) {
    CUfunction f = nullptr;
    check(drv_->cuModuleGetFunction(&f, module_, r.lowered.at(name).c_str()), name.c_str());
    functions_[name] = f;
  }

  lt_ = &cuda::CublasLt::get();
  lt_->check(lt_->create(&lt_handle_), "cublasLtCreate");
  workspace_ = alloc(workspace_bytes_);
  if (const char* a = std::getenv("CA_NN_CUDA_ATTENTION"); a && std::string(a) == "fma") tensor_core_attention = false;
  if (const char* p = std::getenv("CA_NN_CUDA_PROFILE"); p && *p && std::string(p) != "0") profile_ = std::make_unique<Profile>();
}

void Gpu::make_current() const { check(drv_->cuCtxSetCurrent(ctx_), "cuCtxSetCurrent"); }

Gpu::~Gpu() {
  // Teardown errors are ignored: the process is leaving or the context is already dead.
  if (profile_) {
    for (auto& p : profile_->pending) profile_->spare.insert(profile_->spare.end(), {p.start, p.end});
    for (CUevent e : profile_->spare) drv_->cuEventDestroy(e);
  }
  if (scratch_) drv_->cuMemFree(scratch_);
  if (workspace_) drv_->cuMemFree(workspace_);
  gemm_plans_.clear();
  if (lt_handle_) lt_->destroy(lt_handle_);
  if (module_) drv_->cuModuleUnload(module_);
  if (stream_) drv_->cuStreamDestroy(stream_);
}

void Gpu::check(CUresult r, const char* what) const { drv_->check(r, what); }

void Gpu::sync() const { check(drv_->cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

void Gpu::launch(const std::string& name, std::vector<unsigned> grid, std::vector<unsigned> block, unsigned shared_bytes,
                 std::vector<void*> args) const {
  auto it = functions_.find(name);
  if (it == functions_.end()) throw InternalError("nn_cuda: no kernel '" + name + "' in the module");
  grid.resize(3, 1);
  block.resize(3, 1);
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return;  // empty problem
  if (profile_) profile_begin(name);
  check(drv_->cuLaunchKernel(it->second, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes, stream_,
                             args.data(), nullptr),
        name.c_str());
  if (profile_) profile_end();
}

void Gpu::profile_begin(const std::string& name) const {
  Profile& p = *profile_;
  if (p.pending.size() >= 4096) p.fold(*drv_);
  CUevent ev[2];
  for (CUevent& e : ev) {
    if (!p.spare.empty()) {
      e = p.spare.back();
      p.spare.pop_back();
    } else {
      check(drv_->cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
    }
  }
  check(drv_->cuEventRecord(ev[0], stream_), "cuEventRecord");
  p.pending.push_back({name, ev[0], ev[1]});
}

void Gpu::profile_end() const { check(drv_->cuEventRecord(profile_->pending.back().end, stream_), "cuEventRecord"); }

void Gpu::profile_report(const std::string& title) {
  if (!profile_) return;
  profile_->fold(*drv_);
  std::vector<std::pair<std::string, std::pair<double, long>>> rows(profile_->totals.begin(), profile_->totals.end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.first > b.second.first; });
  double total = 0;
  for (auto& r : rows) total += r.second.first;
  std::fprintf(stderr, "nn_cuda profile: %s: %.3f ms of kernels\n", title.c_str(), total);
  for (auto& r : rows)
    std::fprintf(stderr, "  %9.3f ms %5.1f%% %6ld calls  %s\n", r.second.first, 100 * r.second.first / total,
                 r.second.second, r.first.c_str());
  profile_->totals.clear();
}

void Gpu::profile_reset() {
  if (!profile_) return;
  profile_->fold(*drv_);
  profile_->totals.clear();
}

CUdeviceptr Gpu::scratch(std::size_t bytes) {
  if (bytes > scratch_bytes_) {
    if (scratch_) free(scratch_, scratch_bytes_);
    scratch_ = 0;
    scratch_ = alloc(bytes);
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

CUdeviceptr Gpu::alloc(std::size_t bytes) {
  CUdeviceptr p = 0;
  CUresult r = drv_->cuMemAlloc(&p, bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    throw EnvironmentError("nn_cuda: out of GPU memory allocating " + std::to_string(bytes >> 20) + " MiB (" +
                           std::to_string(in_use_ >> 20) + " MiB in use)");
  check(r, "cuMemAlloc");
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return p;
}

void Gpu::free(CUdeviceptr p, std::size_t bytes) {
  drv_->cuMemFree(p);
  in_use_ -= bytes;
}

void Gpu::upload(CUdeviceptr dst, const void* src, std::size_t bytes) const {
  if (bytes) check(drv_->cuMemcpyHtoDAsync(dst, src, bytes, stream_), "cuMemcpyHtoD");
  sync();  // the host buffer may go away
}

void Gpu::download(void* dst, CUdeviceptr src, std::size_t bytes) const {
  if (bytes) check(drv_->cuMemcpyDtoHAsync(dst, src, bytes, stream_), "cuMemcpyDtoH");
  sync();
}

void Gpu::memset0(CUdeviceptr dst, std::size_t bytes) const {
  if (bytes) check(drv_->cuMemsetD8Async(dst, 0, bytes, stream_), "cuMemsetD8");
}

// ---- cuBLASLt ----

struct Gpu::GemmPlan {
  const cuda::CublasLt* lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~GemmPlan() {
    if (la) lt->matrixLayoutDestroy(la);
    if (lb) lt->matrixLayoutDestroy(lb);
    if (lc) lt->matrixLayoutDestroy(lc);
    if (desc) lt->matmulDescDestroy(desc);
  }
};

namespace {
cudaDataType_t cuda_type(DType t) { return t == DType::F32 ? CUDA_R_32F : CUDA_R_16BF; }
uint32_t alignment_of(CUdeviceptr p) {
  uint32_t a = 256;
  while (a > 1 && (p % a) != 0) a >>= 1;
  return a;
}
}  // namespace

void Gpu::gemm(const Gemm& g) {
  if (g.m == 0 || g.n == 0) return;
  const uint32_t al_a = alignment_of(g.a), al_b = alignment_of(g.b), al_c = alignment_of(g.c ? g.c : g.d),
                 al_d = alignment_of(g.d);
  const bool has_bias = g.bias != 0;
  std::string key = std::to_string(g.trans_a) + std::to_string(g.trans_b) + "," + std::to_string(g.m) + "," +
                    std::to_string(g.n) + "," + std::to_string(g.k) + "," + std::to_string(g.lda) + "," +
                    std::to_string(g.ldb) + "," + std::to_string(g.ldc) + "," + dtype_name(g.in) + dtype_name(g.out) +
                    (has_bias ? "b" : "") + (g.beta != 0.f ? "acc" : "") + "," + std::to_string(al_a) + "," +
                    std::to_string(al_b) + "," + std::to_string(al_c) + "," + std::to_string(al_d);
  auto& plan = gemm_plans_[key];
  if (!plan) {
    auto p = std::make_shared<GemmPlan>();
    p->lt = lt_;
    lt_->check(lt_->matmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt_->check(lt_->matmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TRANSA");
    lt_->check(lt_->matmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "TRANSB");
    if (has_bias) {
      cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      lt_->check(lt_->matmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "EPILOGUE");
      cudaDataType_t bt = cuda_type(g.out);
      lt_->check(lt_->matmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)), "BIAS_TYPE");
    }
    // Stored shapes: A is m x k (k x m when transposed), B is k x n (n x k when transposed), C is m x n.
    lt_->check(lt_->matrixLayoutCreate(&p->la, cuda_type(g.in), g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda), "layout A");
    lt_->check(lt_->matrixLayoutCreate(&p->lb, cuda_type(g.in), g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb), "layout B");
    lt_->check(lt_->matrixLayoutCreate(&p->lc, cuda_type(g.out), g.m, g.n, g.ldc), "layout C");
    cublasLtMatmulPreference_t pref = nullptr;
    lt_->check(lt_->preferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    uint64_t ws = workspace_bytes_;
    lt_->preferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    lt_->preferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
    lt_->preferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
    lt_->preferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c));
    lt_->preferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t s = lt_->algoGetHeuristic(lt_handle_, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &result, &found);
    lt_->preferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0)
      throw InternalError("cuBLASLt has no algorithm for the GEMM " + key + " (status " + std::to_string(int(s)) + ")");
    p->algo = result.algo;
    plan = p;
  }
  if (has_bias)
    lt_->check(lt_->matmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)),
               "BIAS_POINTER");
  const float alpha = g.alpha, beta = g.beta;
  CUdeviceptr c = g.c ? g.c : g.d;
  if (profile_)
    profile_begin("gemm " + std::string(g.trans_a ? "T" : "N") + (g.trans_b ? "T" : "N") + " " + std::to_string(g.m) +
                  "x" + std::to_string(g.n) + "x" + std::to_string(g.k) + " " + dtype_name(g.in) + "->" +
                  dtype_name(g.out));
  lt_->check(lt_->matmul(lt_handle_, plan->desc, &alpha, reinterpret_cast<const void*>(g.a), plan->la,
                         reinterpret_cast<const void*>(g.b), plan->lb, &beta, reinterpret_cast<const void*>(c), plan->lc,
                         reinterpret_cast<void*>(g.d), plan->lc, &plan->algo, reinterpret_cast<void*>(workspace_),
                         workspace_bytes_, reinterpret_cast<cudaStream_t>(stream_)),
             "cublasLtMatmul " + key);
  if (profile_) profile_end();
}

Buffer to_device(Gpu& gpu, const std::vector<float>& host, DType dtype) {
  Buffer b(gpu, host.size() * dtype_size(dtype));
  if (dtype == DType::F32) {
    gpu.upload(b.ptr(), host.data(), host.size() * 4);
  } else {
    std::vector<uint16_t> h(host.size());
    for (std::size_t i = 0; i < host.size(); ++i) h[i] = float_to_bf16(host[i]);
    gpu.upload(b.ptr(), h.data(), h.size() * 2);
  }
  return b;
}

std::vector<float> to_host(const Gpu& gpu, CUdeviceptr src, std::size_t count, DType dtype) {
  std::vector<float> out(count);
  if (dtype == DType::F32) {
    gpu.download(out.data(), src, count * 4);
  } else {
    std::vector<uint16_t> h(count);
    gpu.download(h.data(), src, count * 2);
    for (std::size_t i = 0; i < count; ++i) out[i] = bf16_to_float(h[i]);
  }
  return out;
}

}  // namespace ca::nn_cuda
