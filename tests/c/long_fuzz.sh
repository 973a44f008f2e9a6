#!/usr/bin/env bash
# tests/c/long_fuzz.sh -- the C client's fuzzers for longer than the core
# suite runs them (tests/test_trust.py runs each for SHMATARI_FUZZ_SECONDS,
# 5 s by default):
#   1. tests/c/attach_fuzz.c under libFuzzer, ASan and UBSan: crafted headers
#      and segments (prints libFuzzer's runs, cov: and ft:);
#   2. tests/c/concurrent_writer.c under ASan and UBSan: a C client stepping a
#      real `shmatari serve` pool while a thread flips words of its segment
#      (issue 25), once with a synchronous and once with an asynchronous pool.
#
# Usage: tests/c/long_fuzz.sh [SECONDS]   (default 120 each; run from the
# repository root, with the extension built and shmatari importable)
set -euo pipefail
seconds=${1:-120}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
san=(-fsanitize=address,undefined -fno-sanitize-recover=all)

if command -v clang >/dev/null; then
  clang -g -O1 -fsanitize=fuzzer "${san[@]}" -I "$root/csrc/include" \
    "$root/tests/c/attach_fuzz.c" -o "$work/attach_fuzz"
  mkdir -p "$work/corpus"
  (cd "$work" && ./attach_fuzz -max_total_time="$seconds" -max_len=4096 \
    -print_final_stats=1 corpus 2>&1 | grep -E "^#[0-9]+ +(DONE|INITED)|stat::|ERROR|SUMMARY" || true)
  ls "$work"/crash-* 2>/dev/null && { echo "attach_fuzz: crashes found"; exit 1; }
else
  echo "no clang: attach_fuzz skipped"
fi

cc -std=gnu11 -g -O1 -pthread -Wall -Wextra -Werror "${san[@]}" \
  -I "$root/csrc/include" "$root/tests/c/concurrent_writer.c" -o "$work/concurrent_writer"
for batch in 8 4; do
  name="lf$$b$batch"
  python3 -m shmatari.cli serve Pong --num-envs 8 --num-workers 2 \
    --batch-size "$batch" --name "$name" >"$work/serve.out" 2>"$work/serve.err" &
  server=$!
  for _ in $(seq 600); do grep -q '^ready' "$work/serve.out" && break; sleep 0.1; done
  echo "concurrent_writer, batch_size $batch of 8 envs, $seconds s:"
  status=0
  "$work/concurrent_writer" "$name" "$seconds" "$batch" || status=$?
  kill "$server"
  wait "$server" || true
  [ "$status" -eq 0 ] || { echo "concurrent_writer failed ($status)"; exit 1; }
done
