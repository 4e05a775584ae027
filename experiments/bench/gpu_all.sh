#!/usr/bin/env bash
# One GPU script that fits a lent machine (issue 49, item 3):
#
#   bash experiments/bench/gpu_all.sh OUT_DIR            # on a GPU: at most 470 s (estimate below)
#   bash experiments/bench/gpu_all.sh OUT_DIR --quick    # smoke sizes (CI, on the CPU): a few minutes
#
# Three steps, one after another, each under OUT_DIR, each under its own `timeout`:
#   1. gpu_table:   python -m experiments.benchmark --suite=gpu_table: FedAvg, FedZO with
#                   direction_block 0 (materialised) and with the GPU default 4 (streamed), DeComFL,
#                   HiSo at N = 10^4, 10^5, 10^6; the roofs; then FFGB (N = 56, 100 Adam steps) and
#                   FZooS (N = 50, M = 1,000, d = 300, float64) at the vmap suite's sizes
#                   -> OUT_DIR/gpu_table/benchmark.{md,json}
#   2. sweep_table: python -m experiments.benchmark --suite=sweep_table at N = 10^3, K = 1, 8, 64
#                   (FedAvg, FedZO, HiSo) -> OUT_DIR/sweep_table/benchmark.{md,json}
#   3. profile:     the main job's FedAvg, 5 rounds, --profile_dir=OUT_DIR/profile (trace of rounds
#                   2-3) -> OUT_DIR/profile/fedavg/plugins/profile/*/, the run itself in OUT_DIR/main_fedavg
# Each step's output also goes to OUT_DIR/<step>.log; its wall seconds, exit status and limit are
# printed and appended to OUT_DIR/timings.txt (then the total). A failed, timed-out or skipped step
# does not stop the others (the suites rewrite their records after every row, so a step cut short
# keeps its rows); the script exits 1 at the end if any step failed. --quick runs the same three
# commands with the suites' --quick sizes (gpu_table N = 4, 16, FFGB N = 4, FZooS N = 2, d = 8;
# sweep_table N = 8, K = 1, 8), so the command lines cannot rot: tests/experiments/test_benchmark.py
# runs it (slow suite).
#
# Time limits. The whole script has a budget of GPU_ALL_BUDGET = 470 s (< 8 min). Each step runs
# under `timeout --kill-after=5 LIMIT`, LIMIT = min(its cap, budget left - 5 s - the floors kept for
# the steps after it), and a step left under 10 s is skipped (a failure): caps 320 / 145 / 60 s,
# floors 100 (sweep_table) and 30 s (profile). So the steps end by the budget whatever they do, and
# the time an early step does not use goes to the later ones.
#
# Time on one H100 / H200: an ESTIMATE, not a measurement, from the H200 records in BUILD.md
# ("GPU table": docs/benchmarks/gpu_table_h200/run{1,2}/gpu_log.txt; jax 0.11.2). Those runs predate
# the streamed FedZO default: their FedZO rows are the materialised ones (16 GiB of temporaries at
# N = 10^5). FFGB and FZooS have never run on an accelerator: no estimate of theirs is made here.
#   1. gpu_table, run here with --repeats=3 --min_time=0.1 (the stored runs: 0.3):
#      a. the stored 16-row table (N = 10^3..10^6) took 254 s (run 2) and 193 s (run 1) of wall
#         time, start-up and roofs included. Its four N = 10^3 rows, dropped here, are the cheapest:
#         compile 1.2 + 6.1 + 2.2 + 1.7 = 11 s plus timing (1 warm-up + 3 repeats) x 0.3 s x
#         (3 + 5 + 2 + 2 timed workloads) = 14 s, about 25 s. 12 rows at 0.3 s: 254 - 25 = ~230 s.
#      b. timing at --min_time=0.1: each of the 4 passes of a workload lasts max(0.1 s, one call);
#         with run 2's per-call times (rounds, the 200-client loops, the raw/law normal draws) the
#         12 rows' timing falls from ~52 s to ~31 s (computed, not measured): ~209 s.
#      c. FedZO streamed at 10^4, 10^5, 10^6 (new rows): priced as the stored (materialised) FedZO
#         rows: compile + lowering 7.6 + 7.5 + 7.7 = 23 s, timing ~18 s at 0.1 s, and the per-row
#         set-up the log does not time (task, loops, normals; run 2: 230 - 45 s compile - 52 s
#         timing - ~20 s start-up and roofs = ~113 s over 12 rows, ~9.4 s a row) ~28 s: ~69 s.
#      To the roofs: ~209 + 69 = ~278 s. FFGB and FZooS then run in what is left of the 320 s
#      cap, ~40 s by this estimate: if they need more, the step is cut at its limit ("timed out"),
#      its 15 roofed rows kept in benchmark.{md,json}.                                 cap 320 s
#   2. sweep_table (N = 10^3; K = 1, 8, 64 are 1 x 1, 2 x 4, 4 x 16 lr x seeds): per algorithm
#      3 batched + 4 sequential programs (one per lr value) = 21 compiles at the gpu_table log's
#      per-program times: 7 x 1.5 (FedAvg) + 7 x 7 (FedZO) + 7 x 2.5 (HiSo) = 77 s, + 21 x 0.2 s
#      lowering = 4 s; timing 9 rows x 2 sides x (1 + 3) x >= 0.3 s = 22 s, + 2 s for FedZO at
#      K = 64 (64,000 client-members: ~0.45 s per batched chunk, 0.55 s sequential); start-up
#      ~15 s: ~120 s.                                                                  cap 145 s
#   3. profile: start-up ~15 s, one FedAvg compile + evaluation ~5 s, trace written ~5 s:
#      ~25 s.                                                                          cap  60 s
#   Total ~278 + 120 + 25 = ~423 s before FFGB and FZooS; 470 s at most whatever happens (each
#   limit keeps the 5 s of --kill-after inside the budget). If step 1 runs to its 320 s cap, step 2 gets at most
#   470 - 325 - 5 - 30 = 110 s (below its ~120 s estimate: its K = 64 rows may be cut).
#   Override the budget with GPU_ALL_BUDGET and a step's cap with GPU_TABLE_TIMEOUT,
#   SWEEP_TABLE_TIMEOUT, PROFILE_TIMEOUT; PYTHON picks the interpreter (default: python).
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
  SIZE=(--quick) TABLE_SIZE=(--quick)
  GPU_N=4,16 SWEEP_N=8 SWEEP_K=1,8
  CAPS=(900 900 900) FLOORS=(0 0 0)     # CPU sizes on a shared CPU: only a guard against a hung step
  BUDGET=2700
else
  SIZE=(--repeats=3 --min_time=0.3) TABLE_SIZE=(--repeats=3 --min_time=0.1)
  GPU_N=10000,100000,1000000 SWEEP_N=1000 SWEEP_K=1,8,64
  CAPS=(320 145 60) FLOORS=(0 100 30)   # the estimate above
  BUDGET=470                            # < 8 min
fi
BUDGET="${GPU_ALL_BUDGET:-$BUDGET}"
GPU_TABLE_TIMEOUT="${GPU_TABLE_TIMEOUT:-${CAPS[0]}}"
SWEEP_TABLE_TIMEOUT="${SWEEP_TABLE_TIMEOUT:-${CAPS[1]}}"
PROFILE_TIMEOUT="${PROFILE_TIMEOUT:-${CAPS[2]}}"

: > "$OUT/timings.txt"
FAILED=()
START=$(date +%s.%N)

# step NAME CAP_S FLOOR_AFTER_S COMMAND...: runs COMMAND under `timeout` LIMIT = min(CAP_S, budget
# left - 5 s - FLOOR_AFTER_S), output to the terminal and OUT/NAME.log; skipped under 10 s.
step() {
  local name=$1 cap=$2 after=$3 rc=0 t0 secs limit
  shift 3
  limit=$(awk -v b="$BUDGET" -v a="$START" -v now="$(date +%s.%N)" -v c="$cap" -v f="$after" \
    'BEGIN { l = int(b - (now - a) - 5 - f); print (l < c ? l : c) }')
  if (( limit < 10 )); then
    echo "== $name skipped: ${limit} s left of the ${BUDGET} s budget"
    echo "$name 0.0 s rc=skipped timeout=${limit}s (no time left)" | tee -a "$OUT/timings.txt"
    FAILED+=("$name")
    return
  fi
  echo "== $name (timeout ${limit} s): $*"
  t0=$(date +%s.%N)
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee "$OUT/$name.log" || rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  local note=""
  (( rc == 124 || rc == 137 )) && note=" (timed out)"
  echo "$name $secs s rc=$rc timeout=${limit}s$note" | tee -a "$OUT/timings.txt"
  (( rc == 0 )) || FAILED+=("$name")
}

step gpu_table "$GPU_TABLE_TIMEOUT" $(( FLOORS[1] + FLOORS[2] )) \
  "$PY" -m experiments.benchmark --suite=gpu_table "${TABLE_SIZE[@]}" \
  --gpu_table_clients="$GPU_N" --output_dir="$OUT/gpu_table"
step sweep_table "$SWEEP_TABLE_TIMEOUT" "${FLOORS[2]}" \
  "$PY" -m experiments.benchmark --suite=sweep_table "${SIZE[@]}" \
  --sweep_table_clients="$SWEEP_N" --sweep_table_configs="$SWEEP_K" --output_dir="$OUT/sweep_table"
rm -rf "$OUT/profile"                   # no trace of an earlier run passes for this one
# The main job's FedAvg: experiments.run's defaults are experiments/flagfiles/main.cfg (whose
# --fedzo_lr is refused without FedZO in the run).
step profile "$PROFILE_TIMEOUT" 0 "$PY" -m experiments.run --algorithm=fedavg --rounds=5 --eval_every=1 \
  --output_dir="$OUT/main_fedavg" --overwrite --profile_dir="$OUT/profile"

TOTAL=$(awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "total $TOTAL s" | tee -a "$OUT/timings.txt"
echo "tables: $OUT/gpu_table/benchmark.md $OUT/sweep_table/benchmark.md"
echo "trace:  $OUT/profile (open *.trace.json.gz at https://ui.perfetto.dev); step times: $OUT/timings.txt"
if (( ${#FAILED[@]} )); then
  echo "failed: ${FAILED[*]} (see $OUT/<step>.log)" >&2
  exit 1
fi
