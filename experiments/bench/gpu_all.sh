#!/usr/bin/env bash
# One GPU script that fits a lent machine (issue 49, item 3):
#
#   bash experiments/bench/gpu_all.sh OUT_DIR            # on a GPU: about 5-6.5 min (estimate below)
#   bash experiments/bench/gpu_all.sh OUT_DIR --quick    # smoke sizes (CI, on the CPU): a minute or two
#
# Three steps, one after another, each under OUT_DIR, each under its own `timeout`:
#   1. gpu_table:   python -m experiments.benchmark --suite=gpu_table at N = 10^4, 10^5, 10^6
#                   (its algorithms: FedAvg, FedZO, DeComFL, HiSo; roofs measured after the rows)
#                   -> OUT_DIR/gpu_table/benchmark.{md,json}
#   2. sweep_table: python -m experiments.benchmark --suite=sweep_table at N = 10^3, K = 1, 8, 64
#                   (FedAvg, FedZO, HiSo) -> OUT_DIR/sweep_table/benchmark.{md,json}
#   3. profile:     the main job's FedAvg, 5 rounds, --profile_dir=OUT_DIR/profile (trace of rounds
#                   2-3) -> OUT_DIR/profile/fedavg/plugins/profile/*/, the run itself in OUT_DIR/main_fedavg
# Each step's output also goes to OUT_DIR/<step>.log; its wall seconds and exit status are printed
# and appended to OUT_DIR/timings.txt (then the total). A failed or timed-out step does not stop the
# others (the suites rewrite their records after every row, so a step cut short keeps its rows);
# the script exits 1 at the end if any step failed. --quick runs the same three commands with the
# suites' --quick sizes (gpu_table N = 4, 16; sweep_table N = 8, K = 1, 8), so the command lines
# cannot rot: tests/experiments/test_benchmark.py runs it (slow suite).
#
# Time on one H100 / H200: an ESTIMATE, not a measurement, from the H200 records in BUILD.md
# ("GPU table": docs/benchmarks/gpu_table_h200/run{1,2}/gpu_log.txt; jax 0.11.2):
#   1. gpu_table: the full 16-row table (N = 10^3..10^6) took 254 s (run 2) and 193 s (run 1) of
#      wall time, start-up and roofs included, at --repeats=3 --min_time=0.3 (used here too). The
#      four N = 10^3 rows dropped here are the cheapest: compile 1.2 + 6.1 + 2.2 + 1.7 = 11 s plus
#      timing (1 warm-up + 3 repeats) x 0.3 s x (3 + 5 + 2 + 2 timed workloads) = 14 s, about 25 s.
#      12 rows: 254 - 25 = ~230 s at worst (run 1: 193 - 25 = ~170 s).             timeout 255 s
#   2. sweep_table (N = 10^3; K = 1, 8, 64 are 1 x 1, 2 x 4, 4 x 16 lr x seeds): per algorithm
#      3 batched + 4 sequential programs (one per lr value) = 21 compiles at the gpu_table log's
#      per-program times: 7 x 1.5 (FedAvg) + 7 x 7 (FedZO) + 7 x 2.5 (HiSo) = 77 s, + 21 x 0.2 s
#      lowering = 4 s; timing 9 rows x 2 sides x (1 + 3) x >= 0.3 s = 22 s, + 2 s for FedZO at
#      K = 64 (64,000 client-members: ~0.45 s per batched chunk, 0.55 s sequential); start-up
#      ~15 s: ~120 s.                                                             timeout 145 s
#   3. profile: start-up ~15 s, one FedAvg compile + evaluation ~5 s, trace written ~5 s:
#      ~25 s.                                                                     timeout  60 s
#   Total ~230 + 120 + 25 = ~375 s = 6.3 min (run-1 pace: ~315 s); the timeouts add up to
#   255 + 145 + 60 = 460 s (+ 3 x 5 s for a step that ignores SIGTERM) = 475 s < 8 min, so the
#   script ends within 8 minutes whatever a step does. Not in this estimate: FedZO now streams its
#   directions on GPUs (direction_block 4, BUILD.md "FedZO directions"), which the stored table
#   predates. Override a step's limit with GPU_TABLE_TIMEOUT, SWEEP_TABLE_TIMEOUT, PROFILE_TIMEOUT;
#   PYTHON picks the interpreter (default: python).
set -euo pipefail

usage() { echo "usage: bash experiments/bench/gpu_all.sh OUT_DIR [--quick]" >&2; exit 2; }
OUT="" QUICK=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    -*) usage ;;
    *) [[ -z "$OUT" ]] || usage; OUT="$arg" ;;
  esac
done
[[ -n "$OUT" ]] || usage
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"              # absolute, before moving to the repository root
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY="${PYTHON:-python}"

if (( QUICK )); then
  SIZE=(--quick)
  GPU_N=4,16 SWEEP_N=8 SWEEP_K=1,8
  LIMITS=(600 600 600)                  # CPU sizes on a shared CPU: only a guard against a hung step
else
  SIZE=(--repeats=3 --min_time=0.3)
  GPU_N=10000,100000,1000000 SWEEP_N=1000 SWEEP_K=1,8,64
  LIMITS=(255 145 60)                   # the estimate above; they add up to < 8 min
fi
GPU_TABLE_TIMEOUT="${GPU_TABLE_TIMEOUT:-${LIMITS[0]}}"
SWEEP_TABLE_TIMEOUT="${SWEEP_TABLE_TIMEOUT:-${LIMITS[1]}}"
PROFILE_TIMEOUT="${PROFILE_TIMEOUT:-${LIMITS[2]}}"

: > "$OUT/timings.txt"
FAILED=()
START=$(date +%s.%N)

# step NAME LIMIT_S COMMAND...: runs COMMAND under `timeout`, output to the terminal and OUT/NAME.log.
step() {
  local name=$1 limit=$2 rc=0 t0 secs
  shift 2
  echo "== $name (timeout ${limit} s): $*"
  t0=$(date +%s.%N)
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee "$OUT/$name.log" || rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  local note=""
  (( rc == 124 || rc == 137 )) && note=" (timed out)"
  echo "$name $secs s rc=$rc timeout=${limit}s$note" | tee -a "$OUT/timings.txt"
  (( rc == 0 )) || FAILED+=("$name")
}

step gpu_table "$GPU_TABLE_TIMEOUT" "$PY" -m experiments.benchmark --suite=gpu_table "${SIZE[@]}" \
  --gpu_table_clients="$GPU_N" --output_dir="$OUT/gpu_table"
step sweep_table "$SWEEP_TABLE_TIMEOUT" "$PY" -m experiments.benchmark --suite=sweep_table "${SIZE[@]}" \
  --sweep_table_clients="$SWEEP_N" --sweep_table_configs="$SWEEP_K" --output_dir="$OUT/sweep_table"
rm -rf "$OUT/profile"                   # no trace of an earlier run passes for this one
# The main job's FedAvg: experiments.run's defaults are experiments/flagfiles/main.cfg (whose
# --fedzo_lr is refused without FedZO in the run).
step profile "$PROFILE_TIMEOUT" "$PY" -m experiments.run --algorithm=fedavg --rounds=5 --eval_every=1 \
  --output_dir="$OUT/main_fedavg" --overwrite --profile_dir="$OUT/profile"

TOTAL=$(awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "total $TOTAL s" | tee -a "$OUT/timings.txt"
echo "tables: $OUT/gpu_table/benchmark.md $OUT/sweep_table/benchmark.md"
echo "trace:  $OUT/profile (open *.trace.json.gz at https://ui.perfetto.dev); step times: $OUT/timings.txt"
if (( ${#FAILED[@]} )); then
  echo "failed: ${FAILED[*]} (see $OUT/<step>.log)" >&2
  exit 1
fi
