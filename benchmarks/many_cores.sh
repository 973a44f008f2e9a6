#!/usr/bin/env bash
# The scaling run of issue 24, item 4, as one prepared script for a machine
# with many cores (a 16-core device machine where one is lent; any machine
# works): shmatari-bench at 16, 64 and 128 envs, shmatari sync and async
# against EnvPool sync and async and the ceilings, interleaved, then the PPO
# example's CUDA hand-off where torch sees a GPU (with a same-seed replay on 4
# workers and on every torch thread, and benchmarks/ppo_collect_phases.py).
#
#   bash benchmarks/many_cores.sh [OUT_DIR]
#
# OUT_DIR (default benchmarks/results/many-cores-<cores>core) receives one
# .json and one .txt per size (the .txt starts with the command and the
# load), and ppo-cuda*.{log,json}, ppo-cuda-same-seed.txt and
# ppo-collect-phases.{log,json} where a GPU is seen. Environment knobs, for a
# short trial on a small machine: SIZES (default "16 64 128"), ROUNDS (7),
# BURST_SECONDS (2), WARMUP (0.5), PPO_STEPS (65536; 0 skips the PPO run).
# Needs shmatari importable with the 'bench' and 'peers' extras (EnvPool is
# skipped, with the reason in the table, where it is not installed).
set -euo pipefail

cores=$(python3 -c "import os; print(len(os.sched_getaffinity(0)))")
out=${1:-benchmarks/results/many-cores-${cores}core}
sizes=${SIZES:-16 64 128}
rounds=${ROUNDS:-7}
seconds=${BURST_SECONDS:-2}
warmup=${WARMUP:-0.5}
ppo_steps=${PPO_STEPS:-65536}
backends=shmatari,shmatari-async,envpool,envpool-async,ceiling,ceiling-fast,ceiling-sync
mkdir -p "$out"

for n in $sizes; do
  cmd=(shmatari-bench --num-envs "$n" --num-workers "$cores" --rounds "$rounds"
       --seconds "$seconds" --warmup "$warmup" --backends "$backends" --quiet
       --json "$out/bench-breakout-${n}envs.json")
  {
    echo "\$ ${cmd[*]}"
    uptime
    "${cmd[@]}"
    echo "uptime after:"
    uptime
  } > "$out/bench-breakout-${n}envs.txt" 2>&1
  tail -n +3 "$out/bench-breakout-${n}envs.txt" | head -n 14
done

if [ "$ppo_steps" -gt 0 ] && python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  # The CUDA hand-off, then the same seed with 4 workers and with torch on
  # every core: all three must end with the same parameters.
  ppo() {
    python3 examples/ppo_atari.py --env-id Breakout --num-envs 64 --device cuda \
        --total-timesteps "$ppo_steps" --seed 1 --out-dir "$out/$1" "${@:2}" > "$out/$1.log" 2>&1
    cp "$out/$1/summary.json" "$out/$1.json"
  }
  ppo ppo-cuda --num-workers "$cores"
  ppo ppo-cuda-4workers --num-workers 4
  ppo ppo-cuda-threads --num-workers "$cores" --torch-threads "$cores"
  python3 - "$out" <<'PY' | tee "$out/ppo-cuda-same-seed.txt"
import json, sys
for name in ("ppo-cuda", "ppo-cuda-4workers", "ppo-cuda-threads"):
    s = json.load(open(f"{sys.argv[1]}/{name}.json"))
    print(name, "workers", s["args"]["num_workers"], "torch_threads", s["args"]["torch_threads"],
          "agent steps/s", s["sps"], "games", s["games"], s["params_sha256"])
PY
  python3 benchmarks/ppo_collect_phases.py --device cuda --json "$out/ppo-collect-phases.json" \
      > "$out/ppo-collect-phases.log" 2>&1
else
  echo "no GPU seen by torch (or PPO_STEPS=0): the PPO CUDA hand-off was not run"
fi
