#!/usr/bin/env bash
# tests/c/long_fuzz.sh -- the fuzzers of tests/test_trust.py for longer than
# the core suite runs them (SHMATARI_FUZZ_SECONDS, 5 s by default), each
# printing what it did (-s):
#   - tests/c/attach_fuzz.c under libFuzzer, ASan and UBSan, from the crafted
#     headers' corpus (runs, and the final cov: and ft:);
#   - tests/c/concurrent_writer.c under ASan and UBSan: a C client stepping a
#     real `shmatari serve` pool (synchronous, then asynchronous) while a
#     thread flips words of its segment (issue 25);
#   - the same for the Python client, the flips from another process.
#
# Usage: tests/c/long_fuzz.sh [SECONDS]   (default 120 each; from the
# repository root, with the extension built and shmatari importable)
set -euo pipefail
cd "$(dirname "$0")/../.."
SHMATARI_FUZZ_SECONDS=${1:-120} exec python3 -m pytest -q -s -p no:cacheprovider \
  tests/test_trust.py -k "libfuzzer or concurrent_writer"
