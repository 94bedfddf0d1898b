// DeviceBuffer: an owning cudaMalloc allocation (moves, no copies). Freed on the GPU it was
// allocated on, whatever device the destroying thread has current (cudaFree would otherwise
// create a context on that device: a layer of GPU 1 destroyed by a thread on GPU 0).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/common/cuda_check.h"
#include "runtime/capture_mode.h"

namespace fp4moe {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { resize(bytes); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), device_(o.device_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      device_ = o.device_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }

  // Reallocates (contents lost) when `bytes` exceeds the capacity.
  void resize(size_t bytes) {
    if (bytes <= bytes_) return;
    release();
    FP4MOE_CUDA_CHECK(cudaGetDevice(&device_));
    FP4MOE_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    bytes_ = bytes;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  // Errors are dropped: a destructor must not throw, and at process exit the runtime may be gone.
  // The free runs in relaxed capture mode (capture_mode.h): a layer destroyed while another
  // thread captures in global mode would otherwise fail to free, silently, and invalidate that
  // capture.
  void release() {
    if (ptr_) {
      const RelaxedCaptureMode relaxed;
      int current = device_;
      if (cudaGetDevice(&current) == cudaSuccess && current != device_ && cudaSetDevice(device_) == cudaSuccess) {
        cudaFree(ptr_);  // waits for the work that may still use the buffer, as cudaFree does
        (void)cudaSetDevice(current);
      } else {
        cudaFree(ptr_);
      }
    }
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;  // where ptr_ lives
};

// An owning non-blocking CUDA stream, destroyed on every way out of its scope (an exception
// included); converts to cudaStream_t where one is taken.
class OwnedStream {
 public:
  OwnedStream() { FP4MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~OwnedStream() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  operator cudaStream_t() const { return stream_; }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// An owning CUDA event without timing (for ordering), created on the current device and
// destroyed on every way out of its scope.
class OwnedEvent {
 public:
  OwnedEvent() { FP4MOE_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~OwnedEvent() {
    if (event_) cudaEventDestroy(event_);
  }
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;
  operator cudaEvent_t() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Makes `device` current for a scope and restores the caller's device after it: the layer's
// entry points work on the GPU it was created on, whichever device is current when called.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {  // -1: stays on the current device
    FP4MOE_CUDA_CHECK(cudaGetDevice(&previous_));
    if (device >= 0 && previous_ != device) FP4MOE_CUDA_CHECK(cudaSetDevice(device));
  }
  ~ScopedDevice() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace fp4moe
