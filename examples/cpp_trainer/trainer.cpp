// A C++ client of a running shmatari pool: attaches by name, steps every env
// with random actions, checks the frames, and reports env steps per second.
//
//   shmatari serve Breakout --num-envs 16 --name demo &
//   g++ -std=c++17 -O2 -I csrc/include examples/cpp_trainer/trainer.cpp -o trainer
//   ./trainer demo --steps 2000
//
// Output: key=value lines on stdout, the last one `env_steps_per_s=...`.
// Exit status: 0 done; 1 attach failed; 2 bad arguments; 3 a check on the
// frames failed; 4 the pool failed while stepping (server or worker died).
#include <shmatari/shmatari.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct Args {
  std::string name;
  long steps = 1000;          // batches to step after the reset
  double seconds = 0;         // > 0: step for this long instead
  double timeout_s = 10.0;    // per wait, and for attaching
  std::string expect_shape;   // e.g. "4x84x84"; empty: no check
  unsigned seed = 0;          // the actions' generator
  long long pool_seed = -1;   // >= 0: reseed every env from it (shmatari_reseed)
};

int usage(const char *argv0) {
  std::fprintf(stderr,
               "usage: %s NAME [--steps N | --seconds S] [--timeout SECONDS] "
               "[--expect-shape SxHxW[xC]] [--seed S] [--pool-seed S]\n",
               argv0);
  return 2;
}

bool parse(int argc, char **argv, Args *a) {
  if (argc < 2 || argv[1][0] == '-') return false;
  a->name = argv[1];
  for (int i = 2; i < argc; i++) {
    std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const char *v = argv[++i];
    if (flag == "--steps") a->steps = std::atol(v);
    else if (flag == "--seconds") a->seconds = std::atof(v);
    else if (flag == "--timeout") a->timeout_s = std::atof(v);
    else if (flag == "--expect-shape") a->expect_shape = v;
    else if (flag == "--seed") a->seed = (unsigned)std::strtoul(v, nullptr, 10);
    else if (flag == "--pool-seed") a->pool_seed = std::strtoll(v, nullptr, 10);
    else return false;
  }
  return a->steps >= 1 && a->seconds >= 0 && a->timeout_s > 0;
}

int fail_check(const char *what) {
  std::fprintf(stderr, "trainer: check failed: %s\n", what);
  return 3;
}

// The observations of a batch: shape, sizes and pixel sanity.
int check_frames(const shmatari_client &c, const shmatari_batch &b,
                 bool after_reset) {
  const shmatari_geom *h = &c.geom;  // the checked geometry, copied at attach
  uint32_t shape[4];
  int ndim = shmatari_obs_shape(&c, shape);
  uint64_t bytes = 1;
  for (int d = 0; d < ndim; d++) bytes *= shape[d];
  if (bytes != b.obs_stride) return fail_check("obs_stride != product of obs shape");
  const uint64_t frame = h->obs_frame_bytes;
  for (uint32_t i = 0; i < b.size; i++) {
    if (b.env_id[i] < 0 || (uint32_t)b.env_id[i] >= h->num_envs)
      return fail_check("env_id out of range");
    if (h->batch_size == h->num_envs && b.env_id[i] != (int32_t)i)
      return fail_check("a synchronous batch is not in env order");
    const uint8_t *obs = b.obs + i * b.obs_stride;
    const uint8_t *newest = obs + (h->stack_num - 1) * frame;
    if (after_reset) {
      bool any = false;
      for (uint64_t p = 0; p < frame && !any; p++) any = newest[p] != 0;
      if (!any) return fail_check("a first frame is all black");
      // The first observation is the first frame repeated stack_num times.
      for (uint32_t s = 0; s + 1 < h->stack_num; s++)
        if (std::memcmp(obs + s * frame, newest, frame) != 0)
          return fail_check("the first stack is not one frame repeated");
      auto flags = static_cast<const uint32_t *>(b.field[SHMATARI_FIELD_FLAGS]);
      if (!(flags[i] & SHMATARI_FLAG_RESET))
        return fail_check("a reset result lacks SHMATARI_FLAG_RESET");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  Args args;
  if (!parse(argc, argv, &args)) return usage(argv[0]);
  const int64_t timeout_ns = (int64_t)(args.timeout_s * 1e9);

  shmatari_client c;
  int r = shmatari_attach(&c, args.name.c_str(), timeout_ns);
  if (r != SHMATARI_OK) {
    std::fprintf(stderr, "trainer: attach failed (%s): %s\n",
                 shmatari_strerror(r), c.error);
    return 1;
  }
  const shmatari_geom *h = &c.geom;  // the checked geometry, copied at attach
  if (h->autoreset_mode == SHMATARI_AUTORESET_DISABLED) {
    // Its ended envs would need a masked reset (shmatari_reset_envs) before
    // their next send, which this loop does not make: refused here, not at
    // the first game's end (a C++ user's pass, 2026-12-06: exit 4, "the
    // server or a worker died", for the trainer's own refused call).
    std::fprintf(stderr, "trainer: this example steps pools that reset ended "
                         "games themselves; the pool's autoreset_mode is "
                         "'disabled' (serve it with --autoreset-mode next_step "
                         "or same_step)\n");
    shmatari_detach(&c);
    return 5;
  }
  uint32_t shape[4];
  int ndim = shmatari_obs_shape(&c, shape);
  std::string shape_text;
  for (int d = 0; d < ndim; d++)
    shape_text += (d ? "x" : "") + std::to_string(shape[d]);
  std::printf("segment=%s num_envs=%u batch_size=%u num_workers=%u "
              "num_actions=%u frame_skip=%u\n",
              c.segment, h->num_envs, h->batch_size, h->num_workers,
              c.num_actions, h->frame_skip);
  std::printf("obs_shape=%s\n", shape_text.c_str());
  // The server, as every wait judges it (shmatari_owner_alive): its pid and
  // when it started (ABI 1.2), and the pool's minor version, as the checked
  // geometry copied them at attach (never read again from the segment,
  // which another process can rewrite).
  std::printf("abi=%u.%u owner_pid=%d owner_start=%llu\n", SHMATARI_ABI_MAJOR,
              c.geom.abi_minor, (int)c.geom.owner_pid,
              (unsigned long long)c.geom.owner_start);
  if (!args.expect_shape.empty() && args.expect_shape != shape_text) {
    shmatari_detach(&c);
    return fail_check("obs shape differs from --expect-shape");
  }

  std::mt19937 rng(args.seed);
  std::vector<int32_t> actions(h->num_envs);
  shmatari_batch b;
  long episodes = 0;
  uint64_t env_steps = 0;
  int status = 0;

  if (args.pool_seed >= 0) {
    // Env i's streams then depend only on (pool seed, i, options), as with
    // Python's reset(seed=...): the same seed gives the same games.
    const uint64_t words[SHMATARI_SEED_WORDS] = {(uint64_t)args.pool_seed};
    r = shmatari_reseed(&c, words, SHMATARI_RESET_TIMEOUT_NS);
  } else {
    r = shmatari_reset(&c);  // each env keeps its random stream
  }
  if (r == SHMATARI_OK) r = shmatari_wait(&c, &b, timeout_ns);
  if (r == SHMATARI_OK) status = check_frames(c, b, true);
  if (r == SHMATARI_OK) {
    // The first batch's no-op starts: env:frames since its reset.
    auto frames = static_cast<const int64_t *>(b.field[SHMATARI_FIELD_EPISODE_FRAME_NUMBER]);
    std::printf("reset_frames=");
    for (uint32_t i = 0; i < b.size; i++)
      std::printf("%s%d:%lld", i ? "," : "", b.env_id[i], (long long)frames[i]);
    std::printf("\n");
  }
  auto t0 = std::chrono::steady_clock::now();
  auto end = t0 + std::chrono::duration<double>(args.seconds);
  for (long k = 0; (args.seconds > 0 ? std::chrono::steady_clock::now() < end
                                     : k < args.steps) &&
                   r == SHMATARI_OK && status == 0;
       k++) {
    // Step the envs of the batch just received (all of them when synchronous).
    for (uint32_t i = 0; i < b.size; i++)
      actions[i] = (int32_t)(rng() % c.num_actions);
    r = shmatari_send(&c, actions.data(), b.env_id, b.size);
    if (r == SHMATARI_OK) r = shmatari_wait(&c, &b, timeout_ns);
    if (r != SHMATARI_OK) break;
    env_steps += b.size;
    for (uint32_t i = 0; i < b.size; i++)
      episodes += b.terminated[i] || b.truncated[i];
    if (k % 64 == 0) status = check_frames(c, b, false);
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  if (r != SHMATARI_OK) {
    std::fprintf(stderr, "trainer: stepping failed (%s): %s\n",
                 shmatari_strerror(r), c.error);
    shmatari_detach(&c);
    // a call the client refused (the trainer's own fault), or the pool failed
    return r == SHMATARI_ERR_STATE || r == SHMATARI_ERR_INVALID ? 5 : 4;
  }
  shmatari_detach(&c);
  if (status != 0) return status;
  std::printf("env_steps=%llu seconds=%.3f episodes_ended=%ld\n",
              (unsigned long long)env_steps, seconds, episodes);
  std::printf("env_steps_per_s=%.1f\n", seconds > 0 ? env_steps / seconds : 0.0);
  return 0;
}
