// What a timing is measured on and the state it starts from: the GPU's identity (name, UUID,
// driver), the SM clock (NVML, when present), and the L2 flush with the persisting-L2 reset that
// precede every timed call (DESIGN.md §6).
#pragma once
#include <cuda.h>

#include <cstdint>
#include <optional>
#include <string>

#include "libcommon/jsonl.hpp"

namespace ca::measure {

struct GpuIdentity {
  int ordinal = 0;
  std::string name, uuid, arch;  // uuid "GPU-xxxxxxxx-xxxx-..." as nvidia-smi prints it
  std::string driver;            // "580.159.04" from NVML, else "cuda 13.0" from the driver API
  int cuda_driver_version = 0;   // 13000
  std::size_t l2_bytes = 0;
  std::size_t persisting_l2_max_bytes = 0;
  int sm_count = 0;
  std::string pci_bus_id;        // "0000:3b:00.0"
  // The GPU reads and writes the process's ordinary (pageable) host memory through plain pointers
  // (HMM, or ATS on Grace): a kernel could then reach the host memory of the process it runs in.
  // kernel-check's verdict is made in a process that runs no candidate code; kernel-prof's timing
  // is not, so its records say which kind of node measured them.
  bool pageable_memory_access = false;
  Json to_json() const;
};

// Needs the driver (ca::cuda::Driver::get() throws EnvironmentError without one).
GpuIdentity identify_gpu(int ordinal);

// Current SM clock in MHz through NVML (libnvidia-ml.so.1), or nullopt when NVML is absent.
std::optional<int> sm_clock_mhz(const std::string& pci_bus_id);

// The source of the flush's two kernels (ca_read_flush, ca_demote_flush), for the unit test that
// compiles it for each architecture without a GPU.
const char* read_flush_source();

// Evicts the L2 before a timed call. The current context must be the GPU's.
// `read` (what every candidate's timing uses): two kernels of the toolchain's own, in the stream.
// The first reads a buffer twice the L2 with an evict_last policy (the top L2 priority: each fill
// then evicts the least recently used line whatever its priority), the second sets the buffer's
// lines back to normal priority (applypriority). Every call starts from an L2 of clean lines at
// normal priority, none of them its own or the previous call's: nothing to write back (a memset
// flush left the lines dirty), and nothing a call marked evict_last outlasts the flush by the
// flush's own priority, not by the replacement policy of one GPU (on the H100 a read at normal
// priority left none of them either: bench/l2_hints_probe.cu; kernel_prof_gpu_flush_clears holds
// the flush to it). method_name() says "read-demote"; "read" before sm_80 (no eviction priorities
// there: plain loads, no demotion).
// The persisting-L2 lines are also reset (cuCtxResetPersistingL2Cache) and no L2 is set aside for
// them, but the reset is a host call made while earlier calls are still queued: the kernels do
// the work. `memset`: the older flush, for the bench's comparison.
// The read flush also puts its pattern back over any word of the buffer it finds changed, before
// the call: nothing written there reaches a timed call through the L2 (gpu_state.cpp says why).
class L2Flusher {
 public:
  static constexpr int kPatternByte = 0x5a;  // every byte of the buffer, as the read flush expects it
  enum class Method { read, memset };
  explicit L2Flusher(std::size_t l2_bytes, double factor = 2.0, Method method = Method::read);
  ~L2Flusher();
  L2Flusher(const L2Flusher&) = delete;
  L2Flusher& operator=(const L2Flusher&) = delete;
  void flush(CUstream stream);
  std::size_t bytes() const { return bytes_; }
  CUdeviceptr buffer() const { return buffer_; }  // the flush's own buffer (tests write into it)
  const char* method_name() const {
    return method_ == Method::memset ? "memset" : priorities_ ? "read-demote" : "read";
  }
  bool resets_persisting() const { return reset_ != nullptr; }
  // The L2 set aside for persisting accesses in this context (made 0), or -1 where there is none.
  int64_t persisting_set_aside() const { return persisting_set_aside_; }
  // How many 16-byte words of the buffer the read flush has found changed and put back since the
  // flusher was made (0 for `memset`, which overwrites it whole). Synchronizes the context. Only
  // something with the buffer's address writes there: a candidate's kernel.
  uint64_t repaired_words();

 private:
  Method method_;
  CUdeviceptr buffer_ = 0, sink_ = 0;
  std::size_t bytes_ = 0;
  unsigned counter_ = 0;
  CUfunction read_ = nullptr, demote_ = nullptr;
  unsigned blocks_ = 0;
  bool priorities_ = false;  // sm_80 and later: L2 eviction priorities, the flush's evict_last read and demotion
  int64_t persisting_set_aside_ = -1;
  CUresult (*reset_)() = nullptr;
};

}  // namespace ca::measure
