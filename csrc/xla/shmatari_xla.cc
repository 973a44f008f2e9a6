// shmatari_xla.cc -- XLA FFI handlers (CPU) that drive a shmatari pool from
// inside jax.jit / jax.lax.scan: send, recv and step, EnvPool's xla() ops.
//
// Built by shmatari.xla (python -m shmatari.xla --build) with the system C++
// compiler against jax.ffi.include_dir() and csrc/include, into a cache
// directory keyed by this file's hash and jax's version; loaded with ctypes
// and registered with jax.ffi.register_ffi_target(platform="cpu"). No Python
// runs on the step path: each handler calls the C client in
// shmatari/shmatari.h (the same state machine the Python pool drives).
//
// Every op takes the handle first (uint8[8]: the pool's serial number in
// this library's table of clients, shmatari_xla_register, unique in the
// process and random-looking across processes, in native byte order) and returns it as its first result, aliased to the input
// (input_output_aliases={0: 0}): threading the handle through the calls is
// the data dependence that orders them, as EnvPool's. The ops are also
// marked as having side effects (has_side_effect=True), so XLA neither drops
// nor merges them. The `client` attribute holds the same serial, baked into
// the compiled program by shmatari.xla; a handle that does not match it
// (another pool's) is refused. The handlers find the client through the
// table, never through an address baked into the program: a program
// compiled ahead of time (jax.jit(f).lower(...).compile()) outlives the
// Python functions, and with the address it read the freed client of a
// collected pool, or drove a new pool whose client took the same address
// (an attacker's pass, 2026-12-06). A serial is never reused; the pool's
// close removes its serials (shmatari_xla_unregister), and an unknown one
// is a closed pool. The table also counts the handlers inside each pool's
// client, and unregister waits for them to leave before the pool releases
// the client (another thread's jitted call may be inside one: a close()
// on one thread zeroed the client under a handler another thread ran).
//
// Rules the caller keeps (shmatari.xla documents them):
//   - One thread drives a pool at a time: the Python methods of a pool MUST
//     NOT be called while a jitted call on it is still running (jax
//     dispatches asynchronously: jax.block_until_ready its results first).
//   - recv/step results: obs uint8 (batch_size, *obs_shape), copied once
//     from the ring's slot into XLA's buffer; then one array of batch_size
//     per result field (layout.h's SHMATARI_RESULT_FIELDS, in enum order),
//     of the dtype the caller asked for (each field converts to bool, int32,
//     int64, uint32, float32 or float64: shmatari.xla asks for 32-bit types
//     when jax_enable_x64 is off).

#include <dlfcn.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "shmatari/shmatari.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kPollNs = SHMATARI_POLL_NS;  // between liveness checks

// The live pools' clients, by serial (shmatari_xla_register), each with
// the number of handlers using it now: shmatari_xla_unregister waits for
// them to leave before the pool frees the client (a close() from another
// thread while a handler ran freed the client under it).
struct TableEntry {
  shmatari_client *client;  // nullptr: being unregistered
  uint64_t users;
};
std::mutex table_mutex;
std::condition_variable table_left;  // a handler left an entry being removed
std::unordered_map<uint64_t, TableEntry> table;
uint64_t next_serial = 1;
// The leases this thread holds, by serial: a close() that a signal handler
// runs inside this thread's own handler wait must not wait for itself.
thread_local std::unordered_map<uint64_t, uint64_t> held_here;

// A handler's use of a table entry, from FindClient to the handler's end.
class Lease {
 public:
  Lease() = default;
  Lease(const Lease &) = delete;
  Lease &operator=(const Lease &) = delete;
  ~Lease() {
    if (serial_ == 0) return;
    if (--held_here[serial_] == 0) held_here.erase(serial_);
    std::lock_guard<std::mutex> lock(table_mutex);
    auto it = table.find(serial_);
    if (it == table.end()) return;
    if (--it->second.users == 0 && it->second.client == nullptr) {
      table.erase(it);  // its unregister gave up waiting, or waits: wake it
      table_left.notify_all();
    }
  }
  uint64_t serial_ = 0;
};

// The pool's client, found through the handle and held by *lease until the
// handler ends; nullptr with *err set when the handle is not this op's
// pool, or its pool is closed (or closing).
shmatari_client *FindClient(const ffi::AnyBuffer &handle, uint64_t client,
                            Lease *lease, ffi::Error *err) {
  uint64_t from_handle = 0;
  if (handle.size_bytes() != sizeof from_handle || client == 0) {
    *err = ffi::Error::InvalidArgument(
        "shmatari xla: the handle must be the uint8[8] that the pool's xla() "
        "returned, got " + std::to_string(handle.size_bytes()) + " bytes");
    return nullptr;
  }
  std::memcpy(&from_handle, handle.untyped_data(), sizeof from_handle);
  if (from_handle != client) {
    *err = ffi::Error::InvalidArgument(
        "shmatari xla: this handle belongs to another pool: pass the handle "
        "returned by this pool's xla() (or by its recv/send/step)");
    return nullptr;
  }
  shmatari_client *c = nullptr;
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    auto it = table.find(client);
    if (it != table.end() && it->second.client != nullptr) {
      c = it->second.client;
      it->second.users++;
      lease->serial_ = client;
    }
  }
  if (lease->serial_ != 0) held_here[client]++;
  if (c == nullptr || c->hdr == nullptr) {
    *err = ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "shmatari xla: the pool is closed (its client is "
                      "detached): make a new pool and call its xla()");
    return nullptr;
  }
  return c;
}

// The error for a client call's status code; liveness errors break the
// client (as shmatari_wait does), so that the Python pool refuses too.
ffi::Error StatusError(shmatari_client *c, int code) {
  ffi::ErrorCode kind = ffi::ErrorCode::kInternal;
  if (code == SHMATARI_ERR_INVALID) kind = ffi::ErrorCode::kInvalidArgument;
  if (code == SHMATARI_ERR_STATE) kind = ffi::ErrorCode::kFailedPrecondition;
  if (code == SHMATARI_ERR_TIMEOUT) kind = ffi::ErrorCode::kDeadlineExceeded;
  if (code == SHMATARI_ERR_SERVER_DEAD || code == SHMATARI_ERR_WORKER ||
      code == SHMATARI_ERR_CLOSED) {
    shmatari_client_break(c);
    kind = ffi::ErrorCode::kUnavailable;
  }
  // A wait's stall check (shmatari_check_stall) returns NOT_SHMATARI about
  // a segment that is one: "not a shmatari segment" misled there.
  const char *what = code == SHMATARI_ERR_NOT_SHMATARI &&
                             c->state == SHMATARI_CLIENT_BROKEN
                         ? "the env pool cannot go on"
                         : shmatari_strerror(code);
  return ffi::Error(kind, std::string("shmatari xla: ") + what + ": " + c->error);
}

// Copies n elements of type S to out, converting to out's dtype (bools are
// normalized to 0/1: the bytes come from a worker). False: a dtype not
// handled.
template <typename S>
bool CopyField(const void *src, ffi::Result<ffi::AnyBuffer> &out, uint32_t n) {
  const S *s = static_cast<const S *>(src);
  void *d = out->untyped_data();
  switch (out->element_type()) {
    case ffi::DataType::PRED:
      for (uint32_t i = 0; i < n; i++) static_cast<uint8_t *>(d)[i] = s[i] != 0;
      return true;
#define SHMATARI_XLA_CONVERT(DT, T)                                    \
  case ffi::DataType::DT:                                             \
    for (uint32_t i = 0; i < n; i++) static_cast<T *>(d)[i] = (T)s[i]; \
    return true;
      SHMATARI_XLA_CONVERT(S32, int32_t)
      SHMATARI_XLA_CONVERT(S64, int64_t)
      SHMATARI_XLA_CONVERT(U32, uint32_t)
      SHMATARI_XLA_CONVERT(F32, float)
      SHMATARI_XLA_CONVERT(F64, double)
#undef SHMATARI_XLA_CONVERT
    default:
      return false;
  }
}

using CopyFn = bool (*)(const void *, ffi::Result<ffi::AnyBuffer> &, uint32_t);
#define SHMATARI_XLA_COPY_FN(NAME, name, type, unit, meaning) &CopyField<type>,
constexpr CopyFn kCopy[SHMATARI_FIELD_COUNT] = {
    SHMATARI_RESULT_FIELDS(SHMATARI_XLA_COPY_FN)};
#undef SHMATARI_XLA_COPY_FN

bool Convertible(ffi::DataType t) {
  return t == ffi::DataType::PRED || t == ffi::DataType::S32 ||
         t == ffi::DataType::S64 || t == ffi::DataType::U32 ||
         t == ffi::DataType::F32 || t == ffi::DataType::F64;
}

// Checks rets[1..] (obs, then every field) against the pool's batch before
// anything is taken, so that a mismatch loses no batch.
ffi::Error CheckOutputs(const shmatari_geom *g, ffi::RemainingRets &rets) {
  uint32_t n = g->batch_size;
  // A pool with a RAM area (ram_info=True) also returns each row's RAM.
  size_t rams = g->ram_bytes != 0 ? 1 : 0;
  if (rets.size() != 2 + SHMATARI_FIELD_COUNT + rams)
    return ffi::Error::InvalidArgument(
        "shmatari xla: recv/step return the handle, obs and " +
        std::to_string(SHMATARI_FIELD_COUNT) + " fields" +
        (rams ? std::string(" and the RAM") : std::string()) +
        "; this build of the handlers does not match shmatari.xla (rebuild it)");
  if (rams) {
    auto ram = rets.get<ffi::AnyBuffer>(2 + SHMATARI_FIELD_COUNT);
    if (!ram.has_value() || (*ram)->size_bytes() != (size_t)g->ram_bytes * n)
      return ffi::Error::InvalidArgument(
          "shmatari xla: the RAM result does not have shape (batch_size, " +
          std::to_string(g->ram_bytes) + ")");
  }
  auto obs = rets.get<ffi::AnyBuffer>(1);
  if (!obs.has_value() ||
      (*obs)->size_bytes() != (size_t)(g->obs_env_bytes * n))
    return ffi::Error::InvalidArgument(
        "shmatari xla: the obs result does not have the pool's batch shape");
  for (unsigned f = 0; f < SHMATARI_FIELD_COUNT; f++) {
    auto out = rets.get<ffi::AnyBuffer>(2 + f);
    if (!out.has_value() || (*out)->element_count() != n ||
        !Convertible((*out)->element_type()))
      return ffi::Error::InvalidArgument(
          "shmatari xla: result field " + std::to_string(f) +
          " does not have shape (batch_size,) and a supported dtype");
  }
  return ffi::Error::Success();
}

// The words of a timed-out wait: the caller's timeout (the wait itself runs
// in slices of kPollNs between liveness checks, whose length the client's
// own message would give) and the workers whose envs have not answered
// (shmatari_unanswered_text, as Python's recv() says them).
ffi::Error TimeoutError(shmatari_client *c, int64_t timeout_ns) {
  char seconds[32], stuck[SHMATARI_MESSAGE_BYTES];
  std::snprintf(seconds, sizeof seconds, "%g",
                (double)timeout_ns / SHMATARI_SECOND);
  // a stall names its worker alone (the others' commands may be in flight)
  shmatari_unanswered_worker_text(c, c->stalled ? (int64_t)c->stalled - 1 : -1, stuck,
                                  sizeof stuck);
  // c->stalled: a first-ready pool's worker published nothing for the
  // timeout while others filled batches (shmatari_check_progress)
  std::string why = c->stalled
      ? std::string(c->error) + " (xla()'s timeout, " + seconds + " s): " + stuck +
            "; nothing was taken (a step's actions were sent): call recv again to "
            "go on waiting"
      : "no batch of " + std::to_string(c->geom.batch_size) +
            " result(s) within " + seconds +
            " s (xla()'s timeout) with every worker alive: " + stuck +
            "; nothing was taken: call recv again to go on waiting";
  return ffi::Error(ffi::ErrorCode::kDeadlineExceeded,
                    "shmatari xla: timed out: " + why);
}

// -- signals while a handler waits --------------------------------------------
//
// A signal that comes to the waiting thread ends its futex wait
// (SHMATARI_ERR_INTERRUPTED) with Python's handler not run yet: its C part
// has only set a flag. Python's recv() then runs the handlers
// (PyErr_CheckSignals) and waits on unless one raised; so do these handlers,
// on the main thread, through the few functions of CPython's stable ABI
// below, found in the process at run time (no Python.h is needed to build
// this file). A handler that raises (Ctrl-C's KeyboardInterrupt) ends the
// wait with nothing taken, and its exception is raised again in the main
// thread once the jitted call returns (Py_AddPendingCall). Without this a
// Ctrl-C went unseen until a batch came, which a stopped worker never sends.
struct PythonApi {
  int (*is_initialized)();
  int (*gil_ensure)();  // PyGILState_STATE is an int-sized enum
  void (*gil_release)(int);
  int (*check_signals)();
  void (*fetch)(void **, void **, void **);
  void (*restore)(void *, void *, void *);
  int (*add_pending_call)(int (*)(void *), void *);
  void (*dec_ref)(void *);
};

const PythonApi *Python() {
  static const PythonApi api = [] {
    PythonApi a{};
#define SHMATARI_XLA_PY(field, name) \
  a.field = reinterpret_cast<decltype(a.field)>(dlsym(RTLD_DEFAULT, name))
    SHMATARI_XLA_PY(is_initialized, "Py_IsInitialized");
    SHMATARI_XLA_PY(gil_ensure, "PyGILState_Ensure");
    SHMATARI_XLA_PY(gil_release, "PyGILState_Release");
    SHMATARI_XLA_PY(check_signals, "PyErr_CheckSignals");
    SHMATARI_XLA_PY(fetch, "PyErr_Fetch");
    SHMATARI_XLA_PY(restore, "PyErr_Restore");
    SHMATARI_XLA_PY(add_pending_call, "Py_AddPendingCall");
    SHMATARI_XLA_PY(dec_ref, "Py_DecRef");
#undef SHMATARI_XLA_PY
    return a;
  }();
  bool complete = api.is_initialized && api.gil_ensure && api.gil_release &&
                  api.check_signals && api.fetch && api.restore &&
                  api.add_pending_call && api.dec_ref;
  return complete ? &api : nullptr;
}

// The exception a signal handler raised, until the main thread raises it
// again (only touched with the GIL held).
void *g_raised[3];

int RaiseAgain(void *) {  // a pending call: the main thread, the GIL held
  Python()->restore(g_raised[0], g_raised[1], g_raised[2]);
  g_raised[0] = g_raised[1] = g_raised[2] = nullptr;
  return -1;
}

// After each slice of a wait: runs Python's signal handlers where this
// is the main thread (Python runs them there alone). True: one raised (the
// wait ends); false: none did, or not here: wait on.
bool SignalRaised() {
  const PythonApi *py = Python();
  if (py == nullptr || !py->is_initialized() ||
      static_cast<pid_t>(syscall(SYS_gettid)) != getpid())
    return false;
  int gil = py->gil_ensure();
  bool raised = py->check_signals() != 0;
  if (raised) {
    void *t, *v, *tb;
    py->fetch(&t, &v, &tb);
    if (g_raised[0] == nullptr && py->add_pending_call(RaiseAgain, nullptr) == 0) {
      g_raised[0] = t, g_raised[1] = v, g_raised[2] = tb;
    } else {  // one is already waiting to be raised: that one goes first
      for (void *o : {t, v, tb})
        if (o != nullptr) py->dec_ref(o);
    }
  }
  py->gil_release(gil);
  return raised;
}

ffi::Error InterruptedError(shmatari_client *c) {
  return ffi::Error(ffi::ErrorCode::kCancelled,
                    "shmatari xla: a signal handler raised while waiting for a "
                    "batch of " + std::to_string(c->geom.batch_size) +
                    " result(s); nothing was taken: call recv again to go on "
                    "waiting");
}

// Waits for the next batch (timeout_ns < 0: no limit), copies it into
// rets[1..] (checked by CheckOutputs) and consumes it.
ffi::Error TakeBatch(shmatari_client *c, ffi::RemainingRets &rets,
                     int64_t timeout_ns) {
  const shmatari_geom *g = &c->geom;
  int64_t deadline = shmatari_deadline(timeout_ns);  // -1: no limit
  for (;;) {
    int64_t wait = kPollNs;
    if (deadline >= 0) {
      int64_t left = deadline - shmatari_now_ns();
      wait = left < 0 ? 0 : (left < kPollNs ? left : kPollNs);
    }
    // the whole wait's limit for a stalled worker, the slice for the batch
    int r = shmatari_next_batch_within(c, wait, timeout_ns > 0 ? timeout_ns : -1);
    if (r == SHMATARI_OK) break;
    if (r == SHMATARI_ERR_TIMEOUT && c->stalled) return TimeoutError(c, timeout_ns);
    bool again = r == SHMATARI_ERR_TIMEOUT || r == SHMATARI_ERR_INTERRUPTED;
    // After every slice, not only after EINTR: a signal that the kernel
    // handed to another thread (jax runs many), or that landed between two
    // slices, never interrupts this thread's sleep; it only sets Python's
    // flag, and a Ctrl-C waited for the batch (forever, from a stopped
    // worker), as _core._sliced's waits did until 2026-12-05.
    if (again && SignalRaised()) return InterruptedError(c);
    if (!again || (deadline >= 0 && shmatari_now_ns() >= deadline))
      return again ? TimeoutError(c, timeout_ns) : StatusError(c, r);
  }
  const char *slot = shmatari_slot(g, c->taken);
  uint32_t n = g->batch_size;
  // The one copy of the observations: ring slot -> XLA's buffer.
  std::memcpy((*rets.get<ffi::AnyBuffer>(1))->untyped_data(),
              slot + g->slot_obs_offset, (size_t)(g->obs_env_bytes * n));
  // The fields from the client's private copy of the rows (read once by
  // shmatari_next_batch): what its state machine read, not the segment again.
  for (unsigned f = 0; f < SHMATARI_FIELD_COUNT; f++) {
    auto out = *rets.get<ffi::AnyBuffer>(2 + f);
    kCopy[f](shmatari_batch_fields(c, f), out, n);
  }
  if (g->ram_bytes != 0) {
    // Each row's env's RAM (ram_info=True), as Python's recv() takes it:
    // from the RAM area before the batch is released (nothing can be sent
    // to its envs before). The env ids are the private copy's, which
    // shmatari_next_batch checked to be in the pool.
    const int32_t *ids =
        (const int32_t *)shmatari_batch_fields(c, SHMATARI_FIELD_ENV_ID);
    const char *area = (const char *)c->hdr + g->ram_offset;
    auto *out = (uint8_t *)(*rets.get<ffi::AnyBuffer>(2 + SHMATARI_FIELD_COUNT))
                    ->untyped_data();
    for (uint32_t j = 0; j < n; j++)
      std::memcpy(out + (size_t)j * g->ram_bytes,
                  area + (size_t)(uint32_t)ids[j] * g->ram_bytes, g->ram_bytes);
  }
  shmatari_release_batch(c);
  return ffi::Error::Success();
}

// Checks the handle and passes it through (its result is aliased to it).
ffi::Error PassHandle(const ffi::AnyBuffer &handle, ffi::RemainingRets &rets) {
  auto out = rets.get<ffi::AnyBuffer>(0);
  if (!out.has_value() || (*out)->size_bytes() != handle.size_bytes())
    return ffi::Error::InvalidArgument("shmatari xla: bad handle result");
  if ((*out)->untyped_data() != handle.untyped_data())
    std::memcpy((*out)->untyped_data(), handle.untyped_data(),
                handle.size_bytes());
  return ffi::Error::Success();
}

ffi::Error Send(shmatari_client *c, ffi::Buffer<ffi::S32> action,
                ffi::Buffer<ffi::S32> env_id, bool step) {
  size_t n = action.element_count();
  if (env_id.element_count() != n)
    return ffi::Error::InvalidArgument(
        "shmatari xla: " + std::to_string(n) + " actions for " +
        std::to_string(env_id.element_count()) + " env ids");
  if (n > c->geom.num_envs)
    return ffi::Error::InvalidArgument(
        "shmatari xla: " + std::to_string(n) + " actions for a pool of " +
        std::to_string(c->geom.num_envs) + " envs");
  int r = step ? shmatari_check_step(c, (uint32_t)n) : SHMATARI_OK;
  if (r == SHMATARI_OK)
    r = shmatari_send_call(c, step ? SHMATARI_CALL_STEP : SHMATARI_CALL_SEND,
                           action.typed_data(), env_id.typed_data(), (uint32_t)n);
  return r == SHMATARI_OK ? ffi::Error::Success() : StatusError(c, r);
}

ffi::Error SendImpl(ffi::AnyBuffer handle, ffi::Buffer<ffi::S32> action,
                    ffi::Buffer<ffi::S32> env_id, ffi::RemainingRets rets,
                    uint64_t client) {
  ffi::Error err = ffi::Error::Success();
  Lease lease;
  shmatari_client *c = FindClient(handle, client, &lease, &err);
  if (c == nullptr) return err;
  err = Send(c, action, env_id, false);
  return err.success() ? PassHandle(handle, rets) : err;
}

ffi::Error RecvImpl(ffi::AnyBuffer handle, ffi::RemainingRets rets,
                    uint64_t client, int64_t timeout_ns) {
  ffi::Error err = ffi::Error::Success();
  Lease lease;
  shmatari_client *c = FindClient(handle, client, &lease, &err);
  if (c == nullptr) return err;
  err = CheckOutputs(&c->geom, rets);
  if (err.success()) err = TakeBatch(c, rets, timeout_ns);
  return err.success() ? PassHandle(handle, rets) : err;
}

ffi::Error StepImpl(ffi::AnyBuffer handle, ffi::Buffer<ffi::S32> action,
                    ffi::Buffer<ffi::S32> env_id, ffi::RemainingRets rets,
                    uint64_t client, int64_t timeout_ns) {
  ffi::Error err = ffi::Error::Success();
  Lease lease;
  shmatari_client *c = FindClient(handle, client, &lease, &err);
  if (c == nullptr) return err;
  err = CheckOutputs(&c->geom, rets);
  if (err.success()) err = Send(c, action, env_id, true);
  if (err.success()) err = TakeBatch(c, rets, timeout_ns);
  return err.success() ? PassHandle(handle, rets) : err;
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShmatariXlaSend, SendImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .RemainingRets()
                                  .Attr<uint64_t>("client"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShmatariXlaRecv, RecvImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .RemainingRets()
                                  .Attr<uint64_t>("client")
                                  .Attr<int64_t>("timeout_ns"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShmatariXlaStep, StepImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .RemainingRets()
                                  .Attr<uint64_t>("client")
                                  .Attr<int64_t>("timeout_ns"));

// The client-struct layout this build was compiled against: shmatari.xla
// compares it with the extension's before registering the handlers.
extern "C" uint64_t shmatari_xla_client_bytes(void) {
  return sizeof(shmatari_client);
}

// Enters a pool's client (this process's shmatari_client, from
// Segment.client_address) in the table; returns its serial, never 0 and
// never reused.
extern "C" uint64_t shmatari_xla_register(void *client) {
  std::lock_guard<std::mutex> lock(table_mutex);
  // The count's image under an affine map modulo 2**63 with this process's
  // random key: one-to-one (the multiplier is odd), so never reused here,
  // and unlike in another process (serials counted 1, 2, ... in every
  // process: a program exported with jax.export and loaded elsewhere drove
  // whichever pool held its serial there; a reviewer's pass, 2026-12-06).
  // Below 2**63: jax turns the `client` attribute into an MLIR integer
  // through int64 (a larger one failed to lower with std::bad_cast).
  static uint64_t key[2] = {0, 0};
  static pid_t key_pid = 0;
  if (key[0] == 0 || key_pid != getpid()) {  // a forked child draws its own
    key_pid = getpid();
    key[0] = 0;
    if (getrandom(key, sizeof key, 0) != static_cast<ssize_t>(sizeof key)) {
      key[0] = static_cast<uint64_t>(getpid()) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(
                   std::chrono::steady_clock::now().time_since_epoch().count());
      key[1] = key[0] * 0xBF58476D1CE4E5B9ull;
    }
    key[0] |= 1;
  }
  uint64_t serial;
  do {
    serial = (next_serial++ * key[0] + key[1]) & 0x7FFFFFFFFFFFFFFFull;
  } while (serial == 0);
  table[serial] = TableEntry{static_cast<shmatari_client *>(client), 0};
  return serial;
}

// Takes a serial out of the table (the pool is closing: its client is about
// to be released): calls that start from now on fail as on a closed pool,
// and those already inside a handler (another thread's jitted call) are
// waited for, up to timeout_ns. Returns 1 when none is inside any more (the
// client may be released), 0 when one still is after timeout_ns, or when
// this very thread is inside one (a close() run by a signal handler inside
// the handler's wait: it would wait for itself): the caller must leave the
// client and its mapping be, and call again (timeout 0) later. Calling it
// for a serial no longer in the table returns 1.
extern "C" int shmatari_xla_unregister(uint64_t serial, int64_t timeout_ns) {
  std::unique_lock<std::mutex> lock(table_mutex);
  auto it = table.find(serial);
  if (it == table.end()) return 1;
  it->second.client = nullptr;
  auto mine = held_here.find(serial);
  uint64_t own = mine == held_here.end() ? 0 : mine->second;
  auto others_gone = [serial, own] {
    auto j = table.find(serial);
    return j == table.end() || j->second.users <= own;
  };
  bool idle = table_left.wait_for(
      lock, std::chrono::nanoseconds(timeout_ns > 0 ? timeout_ns : 0), others_gone);
  if (!idle || own != 0) return 0;
  table.erase(serial);
  return 1;
}
