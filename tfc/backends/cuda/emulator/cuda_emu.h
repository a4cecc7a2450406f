// CUDA's execution model on the CPU, for testing generated kernels without a GPU.
//
// Included by tfc's CUDA prelude when the text is compiled by g++ (C++20) instead of
// NVRTC; tfc/backends/cuda/emulator.py drives it. The model:
//
// - Blocks run on OS threads (a few workers take block indices from a shared counter);
//   one block at a time per worker, so `__shared__` variables are `static thread_local`.
// - Each CUDA thread of a block is a fiber with its own stack (guard page below it). A
//   fiber runs until it reaches `__syncthreads()`, a warp operation (`__shfl_*_sync`,
//   `__syncwarp`), `__trap()` or its end; then the next runnable fiber runs. The order in
//   which runnable fibers run is an option (ascending, descending, warps reversed,
//   shuffled), so a missing barrier gives wrong numbers under some order.
// - `__syncthreads()` releases when every thread of the block that has not exited waits
//   at it (threads that returned early drop out, as on Volta and later GPUs).
// - A warp operation releases when every lane named in its mask that exists and has not
//   exited waits at a warp operation; each lane then gets its source lane's value posted
//   at that moment (its own value where CUDA says so: outside its `width` segment). A
//   source lane that does not take part gives all-one bits (NaN, -1), never a plausible
//   number. A lane calling with a mask that leaves itself out is a fault.
// - No runnable fiber and nothing to release is a deadlock: reported (which threads wait
//   where), never a hang. `__trap()` and faults end the launch with an error; the other
//   blocks stop being started.
// - Fibers switch with _setjmp/_longjmp (started once with setcontext), so a switch costs
//   no system call.

#pragma once

#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __restrict__ __restrict
#define __shared__ static thread_local

struct tfc_emu_dim3 {
  unsigned int x, y, z;
};

inline thread_local tfc_emu_dim3 threadIdx = {0, 0, 0};
inline thread_local tfc_emu_dim3 blockIdx = {0, 0, 0};
inline thread_local tfc_emu_dim3 blockDim = {1, 1, 1};
inline thread_local tfc_emu_dim3 gridDim = {1, 1, 1};
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

enum Order { ASCENDING = 0, DESCENDING = 1, WARPS_REVERSED = 2, SHUFFLED = 3 };
enum State { READY, AT_BARRIER, AT_WARP, DONE };
enum WarpOp { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, SYNC_WARP };

struct Fiber {
  jmp_buf jb;
  ucontext_t ctx;
  char* stack;
  bool started;
  State state;
  // the warp operation it waits at
  WarpOp op;
  unsigned mask;
  int lane_arg;  // srcLane, delta or laneMask
  int width;
  uint64_t value;
  uint64_t result;
};

typedef void (*Body)(void* args);

struct Launch {
  const char* name;
  Body body;
  void* args;
  long long grid, block, shared_bytes;
  int order;
  unsigned seed;
  std::atomic<long long> next_block{0};
  std::atomic<bool> failed{false};
  std::mutex error_lock;
  std::string error;

  void fail(const std::string& message) {
    std::lock_guard<std::mutex> guard(error_lock);
    if (!failed.load()) error = message;
    failed.store(true);
  }
};

// One worker: the block it runs now and its fibers.
struct Worker {
  Launch* launch;
  std::vector<Fiber> fibers;
  std::vector<int> order;
  char* stacks = nullptr;
  size_t stacks_size = 0;
  std::vector<unsigned char> dynamic_shared;
  jmp_buf sched;
  int current = -1;
  bool fault = false;
  std::string fault_message;
};

inline thread_local Worker* worker = nullptr;

static const size_t kStackSize = 64 * 1024;

inline size_t page_size() { return (size_t)sysconf(_SC_PAGESIZE); }

inline bool allocate_stacks(Worker& w, long long n) {
  size_t page = page_size();
  size_t per = kStackSize + page;  // a guard page below each stack
  w.stacks_size = per * (size_t)n;
  void* mem = mmap(nullptr, w.stacks_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  w.stacks = (char*)mem;
  for (long long t = 0; t < n; ++t) {
    mprotect(w.stacks + per * t, page, PROT_NONE);
    w.fibers[t].stack = w.stacks + per * t + page;
  }
  return true;
}

[[noreturn]] inline void to_scheduler() { _longjmp(worker->sched, 1); }

// Leave the running fiber (its state already set) and come back when it is resumed.
inline void yield() {
  Fiber& f = worker->fibers[worker->current];
  if (_setjmp(f.jb) == 0) to_scheduler();
}

inline void fiber_main() {
  Worker* w = worker;
  w->launch->body(w->launch->args);
  worker->fibers[worker->current].state = DONE;
  to_scheduler();
}

[[noreturn]] inline void fault(const std::string& message) {
  Worker* w = worker;
  w->fault = true;
  w->fault_message = message;
  to_scheduler();
}

inline void resume(Worker& w, int t) {
  Fiber& f = w.fibers[t];
  w.current = t;
  threadIdx.x = (unsigned)t;
  if (_setjmp(w.sched) == 0) {
    if (!f.started) {
      f.started = true;
      setcontext(&f.ctx);
    }
    _longjmp(f.jb, 1);
  }
}

inline std::string ranges(const std::vector<int>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ids[i]);
    if (j > i) out += "-" + std::to_string(ids[j]);
    i = j + 1;
  }
  return out;
}

inline const char* op_name(WarpOp op) {
  switch (op) {
    case SHFL_IDX: return "__shfl_sync";
    case SHFL_UP: return "__shfl_up_sync";
    case SHFL_DOWN: return "__shfl_down_sync";
    case SHFL_XOR: return "__shfl_xor_sync";
    default: return "__syncwarp";
  }
}

// Release the lanes of every warp whose masks are complete; true when any was released.
inline bool release_warps(Worker& w, long long n) {
  bool released = false;
  for (long long base = 0; base < n; base += 32) {
    int lanes = (int)std::min<long long>(32, n - base);
    unsigned live = 0, waiting = 0;
    for (int l = 0; l < lanes; ++l) {
      State s = w.fibers[base + l].state;
      if (s != DONE) live |= 1u << l;
      if (s == AT_WARP) waiting |= 1u << l;
    }
    if (!waiting) continue;
    unsigned ready = 0;
    for (int l = 0; l < lanes; ++l)
      if ((waiting >> l & 1) && (w.fibers[base + l].mask & live & ~waiting) == 0) ready |= 1u << l;
    if (!ready) continue;
    for (int l = 0; l < lanes; ++l) {
      if (!(ready >> l & 1)) continue;
      Fiber& f = w.fibers[base + l];
      int width = f.width, seg = l & ~(width - 1), src = l;
      switch (f.op) {
        case SHFL_IDX: src = seg + (f.lane_arg & (width - 1)); break;
        case SHFL_UP: src = l - f.lane_arg < seg ? l : l - f.lane_arg; break;
        case SHFL_DOWN: src = l + f.lane_arg >= seg + width ? l : l + f.lane_arg; break;
        case SHFL_XOR: src = (l ^ f.lane_arg) >= seg + width ? l : (l ^ f.lane_arg); break;
        case SYNC_WARP: break;
      }
      bool takes_part = src >= 0 && src < lanes && (waiting >> src & 1) && (f.mask >> src & 1);
      f.result = takes_part ? w.fibers[base + src].value : ~(uint64_t)0;
    }
    for (int l = 0; l < lanes; ++l)
      if (ready >> l & 1) w.fibers[base + l].state = READY;
    released = true;
  }
  return released;
}

inline std::string deadlock_report(Worker& w, long long n) {
  std::vector<int> at_barrier, at_warp;
  for (long long t = 0; t < n; ++t) {
    if (w.fibers[t].state == AT_BARRIER) at_barrier.push_back((int)t);
    if (w.fibers[t].state == AT_WARP) at_warp.push_back((int)t);
  }
  std::string msg = "deadlock in block " + std::to_string(blockIdx.x) + ":";
  if (!at_barrier.empty()) msg += " threads " + ranges(at_barrier) + " wait at __syncthreads();";
  if (!at_warp.empty()) {
    Fiber& f = w.fibers[at_warp[0]];
    char mask[16];
    snprintf(mask, sizeof mask, "0x%08x", f.mask);
    msg += " threads " + ranges(at_warp) + " wait at warp operations (thread " +
           std::to_string(at_warp[0]) + ": " + op_name(f.op) + " with mask " + mask +
           ") for lanes that never arrive;";
  }
  msg.pop_back();
  return msg;
}

inline void make_order(Worker& w, long long n, unsigned block_index) {
  w.order.resize(n);
  for (long long t = 0; t < n; ++t) w.order[t] = (int)t;
  switch (w.launch->order) {
    case DESCENDING: std::reverse(w.order.begin(), w.order.end()); break;
    case WARPS_REVERSED: {  // the last warp first, lanes ascending inside each warp
      w.order.clear();
      for (long long warp = (n + 31) / 32 - 1; warp >= 0; --warp)
        for (long long t = warp * 32; t < std::min(n, warp * 32 + 32); ++t) w.order.push_back((int)t);
      break;
    }
    case SHUFFLED: {
      uint64_t s = (uint64_t)w.launch->seed * 0x9E3779B97F4A7C15ull + block_index + 1;
      for (long long t = n - 1; t > 0; --t) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        std::swap(w.order[t], w.order[s % (uint64_t)(t + 1)]);
      }
      break;
    }
    default: break;
  }
}

// Run one block to its end; false (and the launch failed) on a fault or a deadlock.
inline bool run_block(Worker& w, long long b) {
  Launch& L = *w.launch;
  long long n = L.block;
  blockIdx.x = (unsigned)b;
  ucontext_t base;
  getcontext(&base);
  for (long long t = 0; t < n; ++t) {
    Fiber& f = w.fibers[t];
    f.ctx = base;
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = kStackSize;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
    f.started = false;
    f.state = READY;
  }
  if (!w.dynamic_shared.empty()) memset(w.dynamic_shared.data(), 0xff, w.dynamic_shared.size());
  make_order(w, n, (unsigned)b);
  for (;;) {
    for (int t : w.order) {
      if (w.fibers[t].state != READY) continue;
      resume(w, t);
      if (w.fault) {
        L.fail("block " + std::to_string(b) + ", thread " + std::to_string(t) + ": " +
               w.fault_message);
        return false;
      }
    }
    if (release_warps(w, n)) continue;
    bool any_live = false, all_at_barrier = true;
    for (long long t = 0; t < n; ++t) {
      State s = w.fibers[t].state;
      if (s != DONE) any_live = true;
      if (s != DONE && s != AT_BARRIER) all_at_barrier = false;
    }
    if (!any_live) return true;
    if (all_at_barrier) {
      for (long long t = 0; t < n; ++t)
        if (w.fibers[t].state == AT_BARRIER) w.fibers[t].state = READY;
      continue;
    }
    L.fail(deadlock_report(w, n));
    return false;
  }
}

inline void work(Launch* L) {
  Worker w;
  w.launch = L;
  w.fibers.resize(L->block);
  if (!allocate_stacks(w, L->block)) {
    L->fail("cannot allocate fiber stacks");
    return;
  }
  w.dynamic_shared.resize(L->shared_bytes);
  Worker* saved = worker;
  worker = &w;
  blockDim.x = (unsigned)L->block;
  gridDim.x = (unsigned)L->grid;
  for (;;) {
    if (L->failed.load()) break;
    long long b = L->next_block.fetch_add(1);
    if (b >= L->grid) break;
    if (!run_block(w, b)) break;
  }
  worker = saved;
  munmap(w.stacks, w.stacks_size);
}

inline int launch(const char* name, Body body, void* args, long long grid, long long block,
                  long long shared_bytes, int order, unsigned seed, int workers, char* error,
                  long long error_size) {
  Launch L;
  L.name = name;
  L.body = body;
  L.args = args;
  L.grid = grid;
  L.block = block;
  L.shared_bytes = shared_bytes;
  L.order = order;
  L.seed = seed;
  int n = (int)std::max<long long>(1, std::min<long long>(workers, grid));
  if (n == 1) {
    work(&L);
  } else {
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) threads.emplace_back(work, &L);
    for (auto& t : threads) t.join();
  }
  if (!L.failed.load()) return 0;
  snprintf(error, (size_t)error_size, "%s", L.error.c_str());
  return 1;
}

inline uint64_t warp_op(unsigned mask, WarpOp op, int lane_arg, int width, uint64_t value) {
  Worker* w = worker;
  Fiber& f = w->fibers[w->current];
  int lane = w->current % 32;
  if (!(mask >> lane & 1)) {
    char buf[96];
    snprintf(buf, sizeof buf, "%s with mask 0x%08x, which leaves out the calling lane %d",
             op_name(op), mask, lane);
    fault(buf);
  }
  if (width < 1 || width > 32 || (width & (width - 1))) fault(std::string(op_name(op)) +
      " with a width that is not a power of two in 1..32");
  f.op = op;
  f.mask = mask;
  f.lane_arg = lane_arg;
  f.width = width;
  f.value = value;
  f.state = AT_WARP;
  yield();
  return worker->fibers[worker->current].result;
}

template <class T>
inline T shuffle(unsigned mask, T v, WarpOp op, int arg, int width) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "warp shuffles move 4- or 8-byte values");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  uint64_t r = warp_op(mask, op, arg, width, bits);
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

inline void __syncthreads() {
  tfc_emu::Worker* w = tfc_emu::worker;
  w->fibers[w->current].state = tfc_emu::AT_BARRIER;
  tfc_emu::yield();
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  tfc_emu::warp_op(mask, tfc_emu::SYNC_WARP, 0, 32, 0);
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] inline void __trap() { tfc_emu::fault("__trap()"); }

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
  type* name = (type*)tfc_emu::worker->dynamic_shared.data()
