// CUDA's builtins for kernels compiled by g++ (C++20) instead of NVRTC: tfc's CUDA prelude
// includes this header outside NVRTC. Kernels call the emulator's runtime
// (cuda_emu_runtime.cpp, one shared library per process, loaded with RTLD_GLOBAL before
// any kernel library), whose comment describes the execution model. Kept small: it is
// compiled with every kernel module, the runtime once.
//
// `threadIdx`, `blockIdx`, `blockDim`, `gridDim` are thread-local variables the runtime
// sets for the running CUDA thread (1-D: `.y` and `.z` are 0, dims 1); `__shared__`
// variables are `static thread_local` (one block runs at a time on an OS thread);
// `__syncthreads`, warp shuffles and `__trap` switch to the runtime's scheduler.

#pragma once

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __restrict__ __restrict
#define __shared__ static thread_local

struct tfc_emu_dim3 {
  unsigned int x, y, z;
};

// Defined by the runtime library (one per process), set by its scheduler for the running
// CUDA thread.
extern "C" {
extern thread_local tfc_emu_dim3 tfc_emu_thread_idx, tfc_emu_block_idx, tfc_emu_block_dim,
    tfc_emu_grid_dim;
int tfc_emu_launch(const char* name, void (*body)(void*), void* args, long long grid,
                   long long block, long long shared_bytes, int order, unsigned seed,
                   int workers, double timeout_s, char* error, long long error_size);
void tfc_emu_syncthreads(void);
unsigned long long tfc_emu_warp_op(unsigned mask, int op, int lane_arg, int width,
                                   unsigned long long value);
[[noreturn]] void tfc_emu_trap(void);
void* tfc_emu_dynamic_shared(void);
}

#define threadIdx tfc_emu_thread_idx
#define blockIdx tfc_emu_block_idx
#define blockDim tfc_emu_block_dim
#define gridDim tfc_emu_grid_dim
static const int warpSize = 32;

namespace tfc_emu {

inline _Float16 bits_to_half(unsigned short h) {
  _Float16 f;
  memcpy(&f, &h, 2);
  return f;
}
inline unsigned short half_to_bits(_Float16 f) {
  unsigned short h;
  memcpy(&h, &f, 2);
  return h;
}

enum WarpOp { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, SYNC_WARP };

template <class T>
inline T shuffle(unsigned mask, T v, WarpOp op, int arg, int width) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "warp shuffles move 4- or 8-byte values");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  uint64_t r = tfc_emu_warp_op(mask, op, arg, width, bits);
  T out;
  memcpy(&out, &r, sizeof(T));
  return out;
}

template <class T>
inline T atomic_update(T* p, T v, int kind) {  // kind: 0 add, 1 max, 2 min, 3 exchange
  T old;
  __atomic_load(p, &old, __ATOMIC_SEQ_CST);
  for (;;) {
    T desired = kind == 0 ? (T)(old + v) : kind == 1 ? (old < v ? v : old)
                : kind == 2 ? (v < old ? v : old) : v;
    if (__atomic_compare_exchange(p, &old, &desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
      return old;
  }
}

template <class T>
inline T atomic_cas(T* p, T compare, T value) {
  __atomic_compare_exchange(p, &compare, &value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // the old value, whether or not it was replaced
}

}  // namespace tfc_emu

inline void __syncthreads() { tfc_emu_syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  tfc_emu_warp_op(mask, tfc_emu::SYNC_WARP, 0, 32, 0);
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] inline void __trap() { tfc_emu_trap(); }

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return tfc_emu::shuffle(mask, v, tfc_emu::SHFL_IDX, src_lane, width);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return tfc_emu::shuffle(mask, v, tfc_emu::SHFL_UP, (int)delta, width);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return tfc_emu::shuffle(mask, v, tfc_emu::SHFL_DOWN, (int)delta, width);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return tfc_emu::shuffle(mask, v, tfc_emu::SHFL_XOR, lane_mask, width);
}

inline float atomicAdd(float* p, float v) { return tfc_emu::atomic_update(p, v, 0); }
inline double atomicAdd(double* p, double v) { return tfc_emu::atomic_update(p, v, 0); }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline int atomicMax(int* p, int v) { return tfc_emu::atomic_update(p, v, 1); }
inline int atomicMin(int* p, int v) { return tfc_emu::atomic_update(p, v, 2); }
inline int atomicExch(int* p, int v) { return tfc_emu::atomic_update(p, v, 3); }
inline float atomicExch(float* p, float v) { return tfc_emu::atomic_update(p, v, 3); }
inline int atomicCAS(int* p, int c, int v) { return tfc_emu::atomic_cas(p, c, v); }
inline unsigned atomicCAS(unsigned* p, unsigned c, unsigned v) {
  return tfc_emu::atomic_cas(p, c, v);
}
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long c,
                                    unsigned long long v) {
  return tfc_emu::atomic_cas(p, c, v);
}

inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return (unsigned)(((unsigned long long)a * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }

#define TFC_DYNAMIC_SHARED(type, name) \
  type* name = (type*)tfc_emu_dynamic_shared()
