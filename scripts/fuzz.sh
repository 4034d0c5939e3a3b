#!/usr/bin/env bash
# Builds the libFuzzer targets in Fuzz/ (address sanitizer on) and runs each for a given time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET…]    default: 60 seconds, every target
#   targets: FuzzJobParser FuzzBinaryFraming FuzzFeedbackTuple FuzzConfig FuzzAMQPFields
#            FuzzJobEnvelope FuzzAdminQuery FuzzRegistration FuzzGroupJob FuzzFleet FuzzContentAssembler
#            FuzzAPNsAnswer FuzzPeerHost FuzzRFC3339 FuzzDeliveryEvent FuzzFeedbackEvent
#
# Each target starts from its committed seeds (Fuzz/Corpus/TARGET) in a scratch copy
# (Fuzz/work/TARGET: new inputs do not touch the committed corpus). A crash, a sanitizer report,
# a leak or an input taking longer than FUZZ_INPUT_TIMEOUT seconds (default 10) stops the target;
# the input is kept in Fuzz/artifacts/TARGET/ and the script fails. A summary line per target
# gives its executions and time. Targets run FUZZ_JOBS at a time (default: one a core). Extra
# libFuzzer flags: FUZZ_FLAGS="-max_len=65536 …".
set -euo pipefail
cd "$(dirname "$0")/.."
all_targets=(FuzzJobParser FuzzBinaryFraming FuzzFeedbackTuple FuzzConfig FuzzAMQPFields FuzzJobEnvelope)
all_targets+=(FuzzAdminQuery FuzzRegistration FuzzGroupJob FuzzFleet FuzzContentAssembler FuzzAPNsAnswer FuzzPeerHost FuzzRFC3339)
all_targets+=(FuzzDeliveryEvent FuzzFeedbackEvent)
seconds=${1:-60}
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS] [TARGET…]" >&2; exit 2; }
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target $t (${all_targets[*]})" >&2; exit 2; }
done

log_dir=Fuzz/work/logs
mkdir -p "$log_dir"
echo "fuzz.sh: building every target (release, -sanitize=fuzzer,address)" >&2
# Every target of the Fuzz package at once: `swift build` given several --product flags builds
# only the last one, so a fresh clone would have had one fuzzer of four.
build=(swift build --package-path Fuzz -c release -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library)
if ! "${build[@]}" > "$log_dir/build.log" 2>&1; then
  grep -E 'error:' "$log_dir/build.log" >&2 || tail -n 30 "$log_dir/build.log" >&2
  echo "fuzz.sh: build failed (Fuzz/work/logs/build.log)" >&2
  exit 1
fi
bin=$(swift build --package-path Fuzz -c release -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library --show-bin-path)

for t in "${targets[@]}"; do
  [ -x "$bin/$t" ] || { echo "fuzz.sh: the build made no $bin/$t" >&2; exit 1; }
done
# One target's run, its verdict written to $log_dir/$t.verdict (read back in the targets' order).
run_target() {
  local t=$1 corpus=Fuzz/work/$1 artifacts=Fuzz/artifacts/$1 log=$log_dir/$1.log status=0 runs took units
  mkdir -p "$corpus" "$artifacts"
  cp -n Fuzz/Corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  # detect_leaks is on by default with ASan on Linux; said here so nobody wonders.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} "$bin/$t" "$corpus" \
    -max_total_time="$seconds" -timeout="${FUZZ_INPUT_TIMEOUT:-10}" -rss_limit_mb=2048 \
    -detect_leaks=1 -print_final_stats=1 -artifact_prefix="$artifacts/" ${FUZZ_FLAGS:-} > "$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
  units=$(ls "$corpus" | wc -l)
  if [ "$status" -eq 0 ]; then
    echo "ok fuzz.sh: $t: ${runs:-?} executions in ${took:-?} s, no crash, hang or leak (corpus $units inputs)" > "$log_dir/$t.verdict"
  else
    { echo "FAILED fuzz.sh: $t FAILED (exit $status) after ${runs:-?} executions; input in $artifacts/; log $log:"
      grep -E -m 20 'ERROR|SUMMARY|Fatal error|fatal error|Precondition|==[0-9]+==|artifact' "$log" || tail -n 40 "$log"
    } > "$log_dir/$t.verdict"
  fi
}
# Targets run side by side, one a core (FUZZ_JOBS to choose): each is one process that uses one
# core, so on a CI machine of two cores the phase takes half the time for the same fuzzing.
jobs=${FUZZ_JOBS:-$(nproc)}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: FUZZ_JOBS must be a positive number" >&2; exit 2; }
echo "fuzz.sh: ${#targets[@]} targets, ${seconds}s each, $jobs at a time" >&2
running=0
for t in "${targets[@]}"; do
  rm -f "$log_dir/$t.verdict"
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  run_target "$t" &
  running=$((running + 1))
done
wait
failed=()
for t in "${targets[@]}"; do
  verdict=$log_dir/$t.verdict
  if [ -f "$verdict" ] && head -n 1 "$verdict" | grep -q '^ok '; then
    sed -n '1s/^ok //p' "$verdict"
  else
    [ -f "$verdict" ] && sed '1s/^FAILED //' "$verdict" >&2 || echo "fuzz.sh: $t ended without a verdict" >&2
    failed+=("$t")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz.sh: failed: ${failed[*]}" >&2; exit 1; }
