"""The C text every generated CUDA file starts with (``kernel.module_source``).

One prelude serves three compilers, so a kernel is checked on the CPU exactly as the GPU
compiles it:

- NVRTC (``__CUDACC_RTC__``): no libc headers exist there, so the fixed-width integers are
  declared here; math functions and CUDA's builtins are NVRTC's own.
- ``nvcc -ptx`` (``__CUDACC__`` without ``__CUDACC_RTC__``): the system's ``<stdint.h>``.
- g++ with ``emulator/cuda_emu.h`` (neither defined): that header defines CUDA's execution
  model (blocks, threads, barriers, warp shuffles, shared memory, atomics) on the CPU and
  ``<math.h>``'s functions stand in for CUDA's.

What generated code may use (and nothing else):

- Types: ``int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t`` (64-bit
  ones are ``long``/``unsigned long`` everywhere, as in glibc, so overloads resolve the
  same on both sides), ``bool``, ``float``, ``double``, ``long long``, and ``tfc_f16``:
  f16 *storage* (16 bits, ``unsigned short``). Arithmetic is never done on ``tfc_f16``:
  ``tfc_h2f(h) -> float`` (exact), ``tfc_f2h(float) -> tfc_f16`` and
  ``tfc_d2h(double) -> tfc_f16`` (each one rounding to nearest even, as numpy's casts;
  a double goes to f16 in one rounding, not through f32).
- Constants: ``TFC_INF``/``TFC_NAN`` (float, NaN is 0x7fc00000 as numpy's) and
  ``TFC_INF_D``/``TFC_NAN_D`` (double). ``tfc_isnan(x)``/``tfc_isinf(x)`` for float and
  double.
- Math (float and double names): ``expf logf sqrtf tanhf sinf cosf floorf ceilf fabsf
  powf rsqrtf fmodf log1pf expm1f erff truncf rintf fminf fmaxf copysignf`` and ``exp log
  sqrt tanh sin cos floor ceil fabs pow rsqrt fmod log1p expm1 erf trunc rint fmin fmax
  copysign``; also ``tanf atanf asinf acosf atan2f erfcf`` and ``tan atan asin acos atan2
  erfc``. On a GPU these are CUDA's accurate functions (never the ``__expf``
  intrinsics; ulp bounds in the CUDA programming guide's "Mathematical Functions"
  appendix, e.g. expf 2, logf 1, tanhf 2, sinf/cosf 2, powf 4, rsqrtf 2 ulp; sqrtf, /,
  floorf, fabsf exact). In the emulator they are glibc's (within 1 ulp), so a test's
  tolerance must allow the GPU's bound, not the emulator's. ``+ - * /`` are IEEE, round
  to nearest, no FMA contraction on either side (NVRTC gets ``--fmad=false``, g++
  ``-ffp-contract=off``), denormals kept.
- Bit casts: ``__float_as_int __int_as_float __float_as_uint __uint_as_float
  __double_as_longlong __longlong_as_double``; ``__umulhi``, ``__umul64hi``.
- Execution model: ``__global__ __device__ __forceinline__ __restrict__``,
  ``blockIdx.x threadIdx.x blockDim.x gridDim.x`` (1-D: ``.y``/``.z`` are 0 / 1),
  ``__shared__`` arrays of static size declared inside a kernel, dynamic shared memory
  only as ``TFC_DYNAMIC_SHARED(type, name);`` (a ``type* name`` of the launch's
  ``shared_bytes``), ``__syncthreads()``, ``__syncwarp(mask)``, ``__threadfence()``,
  ``__shfl_sync/__shfl_down_sync/__shfl_up_sync/__shfl_xor_sync(mask, value, lane_or_delta
  [, width])`` for 4- and 8-byte values, ``atomicAdd`` (float, double, int, unsigned int,
  unsigned long long), ``atomicMax``/``atomicMin`` (int), ``atomicCAS`` (int, unsigned
  int, unsigned long long), ``atomicExch`` (int, float), ``__trap()``.
- Kernels are ``extern "C" __global__ void name(...)`` with the parameters of their
  ``Kernel.params``; ``TFC_WARP_SIZE`` is 32.

Limits the emulator shares with a GPU: block of at most 1024 threads, at most 48 KiB of
dynamic shared memory, shared memory not cleared between blocks; its own: each thread's
locals fit a 64 KiB stack (keep per-thread arrays small), a thread that never reaches a
synchronization point or its end hangs (as on a GPU).
"""

PRELUDE = r"""// tfc CUDA prelude: see tfc/backends/cuda/prelude.py for what kernels may use.
#if defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
#elif defined(__CUDACC__)
#include <stdint.h>
#else
#include "cuda_emu.h"
#endif

#define TFC_WARP_SIZE 32
typedef unsigned short tfc_f16;

#if defined(__CUDACC__)
#define TFC_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
__device__ __forceinline__ float tfc_h2f(tfc_f16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ tfc_f16 tfc_f2h(float f) {
  tfc_f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ tfc_f16 tfc_d2h(double d) {
  tfc_f16 h;
  asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d));
  return h;
}
#else
static inline float tfc_h2f(tfc_f16 h) { return (float)tfc_emu::bits_to_half(h); }
static inline tfc_f16 tfc_f2h(float f) { return tfc_emu::half_to_bits((_Float16)f); }
static inline tfc_f16 tfc_d2h(double d) { return tfc_emu::half_to_bits((_Float16)d); }
#endif

#define TFC_INF __int_as_float(0x7f800000)
#define TFC_NAN __int_as_float(0x7fc00000)
#define TFC_INF_D __longlong_as_double(0x7ff0000000000000LL)
#define TFC_NAN_D __longlong_as_double(0x7ff8000000000000LL)

__device__ __forceinline__ bool tfc_isnan(float x) { return x != x; }
__device__ __forceinline__ bool tfc_isnan(double x) { return x != x; }
__device__ __forceinline__ bool tfc_isinf(float x) { return fabsf(x) == TFC_INF; }
__device__ __forceinline__ bool tfc_isinf(double x) { return fabs(x) == TFC_INF_D; }
"""

__all__ = ["PRELUDE"]
