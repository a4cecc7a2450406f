// CUDA's execution model on the CPU, for testing generated kernels without a GPU.
//
// The emulator's runtime: compiled once into a shared library that tfc loads with
// RTLD_GLOBAL before any kernel library (cuda_emu.h declares what kernels call). The model:
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
// - A launch that runs past its time limit (an endless loop) is stopped by a watchdog
//   thread that signals the workers: the fiber running is abandoned and the launch fails.

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>
#include <thread>

#include "cuda_emu.h"

extern "C" {
thread_local tfc_emu_dim3 tfc_emu_thread_idx = {0, 0, 0};
thread_local tfc_emu_dim3 tfc_emu_block_idx = {0, 0, 0};
thread_local tfc_emu_dim3 tfc_emu_block_dim = {1, 1, 1};
thread_local tfc_emu_dim3 tfc_emu_grid_dim = {1, 1, 1};
}

namespace tfc_emu {

enum Order { ASCENDING = 0, DESCENDING = 1, WARPS_REVERSED = 2, SHUFFLED = 3 };
enum State { READY, AT_BARRIER, AT_WARP, DONE };

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
  double timeout_s;
  std::atomic<long long> next_block{0};
  std::atomic<bool> failed{false};
  std::atomic<bool> timed_out{false};
  std::mutex threads_lock;  // the OS threads running blocks now, for the watchdog
  std::vector<pthread_t> threads;
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
  volatile sig_atomic_t in_fiber = 0;  // a fiber runs (the watchdog may interrupt it)
  volatile sig_atomic_t interrupted = 0;
};

thread_local Worker* worker = nullptr;

static const size_t kStackSize = 64 * 1024;

static size_t page_size() { return (size_t)sysconf(_SC_PAGESIZE); }

static bool allocate_stacks(Worker& w, long long n) {
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

[[noreturn]] static void to_scheduler() { _longjmp(worker->sched, 1); }

// Leave the running fiber (its state already set) and come back when it is resumed.
static void yield() {
  Fiber& f = worker->fibers[worker->current];
  if (_setjmp(f.jb) == 0) to_scheduler();
}

static void fiber_main() {
  Worker* w = worker;
  w->launch->body(w->launch->args);
  worker->fibers[worker->current].state = DONE;
  to_scheduler();
}

[[noreturn]] static void fault(const std::string& message) {
  Worker* w = worker;
  w->fault = true;
  w->fault_message = message;
  to_scheduler();
}

static void resume(Worker& w, int t) {
  Fiber& f = w.fibers[t];
  w.current = t;
  tfc_emu_thread_idx.x = (unsigned)t;
  if (_setjmp(w.sched) == 0) {
    w.in_fiber = 1;
    if (!f.started) {
      f.started = true;
      setcontext(&f.ctx);
    }
    _longjmp(f.jb, 1);
  }
  w.in_fiber = 0;
}

// The watchdog's signal: a fiber that runs past the launch's time limit is abandoned
// (its block and launch fail); kernels are plain computation, so leaving one mid-way is
// safe. SA_NODEFER: the handler leaves by a jump, which must not leave the signal blocked.
static int watchdog_signal() { return SIGRTMIN + 7; }

static void on_watchdog(int) {
  Worker* w = worker;
  if (w != nullptr && w->in_fiber) {
    w->in_fiber = 0;
    w->interrupted = 1;
    _longjmp(w->sched, 1);
  }
}

static void install_watchdog_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_watchdog;
    sa.sa_flags = SA_NODEFER | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(watchdog_signal(), &sa, nullptr);
  });
}

static std::string ranges(const std::vector<int>& ids) {
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

static const char* op_name(WarpOp op) {
  switch (op) {
    case SHFL_IDX: return "__shfl_sync";
    case SHFL_UP: return "__shfl_up_sync";
    case SHFL_DOWN: return "__shfl_down_sync";
    case SHFL_XOR: return "__shfl_xor_sync";
    default: return "__syncwarp";
  }
}

// Release the lanes of every warp whose masks are complete; true when any was released.
static bool release_warps(Worker& w, long long n) {
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

static std::string deadlock_report(Worker& w, long long n) {
  std::vector<int> at_barrier, at_warp;
  for (long long t = 0; t < n; ++t) {
    if (w.fibers[t].state == AT_BARRIER) at_barrier.push_back((int)t);
    if (w.fibers[t].state == AT_WARP) at_warp.push_back((int)t);
  }
  std::string msg = "deadlock in block " + std::to_string(tfc_emu_block_idx.x) + ":";
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

static void make_order(Worker& w, long long n, unsigned block_index) {
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
static std::string timeout_message(Launch& L, long long b, int t) {
  char buf[160];
  snprintf(buf, sizeof buf, "did not finish within %g s (an endless loop?)%s", L.timeout_s,
           t < 0 ? "" : ": ");
  std::string msg = buf;
  if (t >= 0) msg += "thread " + std::to_string(t) + " of block " + std::to_string(b) +
                     " was still running";
  return msg;
}

static bool run_block(Worker& w, long long b) {
  Launch& L = *w.launch;
  long long n = L.block;
  tfc_emu_block_idx.x = (unsigned)b;
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
      if (L.timed_out.load()) {
        L.fail(timeout_message(L, b, -1));
        return false;
      }
      resume(w, t);
      if (w.interrupted) {
        L.fail(timeout_message(L, b, t));
        return false;
      }
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

static void work(Launch* L) {
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
  {
    std::lock_guard<std::mutex> guard(L->threads_lock);
    L->threads.push_back(pthread_self());
  }
  tfc_emu_block_dim.x = (unsigned)L->block;
  tfc_emu_grid_dim.x = (unsigned)L->grid;
  for (;;) {
    if (L->failed.load()) break;
    long long b = L->next_block.fetch_add(1);
    if (b >= L->grid) break;
    if (!run_block(w, b)) break;
  }
  {
    std::lock_guard<std::mutex> guard(L->threads_lock);
    L->threads.erase(std::find(L->threads.begin(), L->threads.end(), pthread_self()));
  }
  worker = saved;
  munmap(w.stacks, w.stacks_size);
}

static int launch(const char* name, Body body, void* args, long long grid, long long block,
                  long long shared_bytes, int order, unsigned seed, int workers,
                  double timeout_s, char* error, long long error_size) {
  Launch L;
  L.name = name;
  L.body = body;
  L.args = args;
  L.grid = grid;
  L.block = block;
  L.shared_bytes = shared_bytes;
  L.order = order;
  L.seed = seed;
  L.timeout_s = timeout_s;
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog;
  if (timeout_s > 0) {
    install_watchdog_handler();
    watchdog = std::thread([&] {
      std::unique_lock<std::mutex> lock(m);
      if (cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done; }))
        return;
      L.timed_out.store(true);
      while (!done) {  // again and again: a worker may be between two fibers
        {
          std::lock_guard<std::mutex> guard(L.threads_lock);
          for (pthread_t t : L.threads) pthread_kill(t, watchdog_signal());
        }
        cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return done; });
      }
    });
  }
  int n = (int)std::max<long long>(1, std::min<long long>(workers, grid));
  if (n == 1) {
    work(&L);
  } else {
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) threads.emplace_back(work, &L);
    for (auto& t : threads) t.join();
  }
  if (watchdog.joinable()) {
    {
      std::lock_guard<std::mutex> lock(m);
      done = true;
    }
    cv.notify_all();
    watchdog.join();
  }
  if (!L.failed.load()) return 0;
  snprintf(error, (size_t)error_size, "%s", L.error.c_str());
  return 1;
}

static uint64_t warp_op(unsigned mask, WarpOp op, int lane_arg, int width, uint64_t value) {
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

}  // namespace tfc_emu

extern "C" {

int tfc_emu_launch(const char* name, void (*body)(void*), void* args, long long grid,
                   long long block, long long shared_bytes, int order, unsigned seed,
                   int workers, double timeout_s, char* error, long long error_size) {
  return tfc_emu::launch(name, body, args, grid, block, shared_bytes, order, seed, workers,
                         timeout_s, error, error_size);
}

void tfc_emu_syncthreads(void) {
  tfc_emu::Worker* w = tfc_emu::worker;
  w->fibers[w->current].state = tfc_emu::AT_BARRIER;
  tfc_emu::yield();
}

unsigned long long tfc_emu_warp_op(unsigned mask, int op, int lane_arg, int width,
                                   unsigned long long value) {
  return tfc_emu::warp_op(mask, (tfc_emu::WarpOp)op, lane_arg, width, value);
}

void tfc_emu_trap(void) { tfc_emu::fault("__trap()"); }

void* tfc_emu_dynamic_shared(void) { return tfc_emu::worker->dynamic_shared.data(); }

}  // extern "C"
