#!/usr/bin/env bash
# The store's live write path with PostgreSQL held to 4, 8 and 16 cores (bench/store_cores.py), as one script
# for a lent machine: installs the wheels carried in .whl/ (if any), then runs the bench under a time limit,
# its log and JSON written to $OUT as it goes. Knobs (environment): STORE_CORES_CORES ("4,8,16"),
# STORE_CORES_STATEMENTS ("1,2": statements at once, multiples of k), STORE_CORES_CHUNKS (150000),
# STORE_CORES_LOAD_S (90: seconds of bulk loading at most), STORE_CORES_STEP_S (8), STORE_CORES_VECTOR_S (6), STORE_CORES_RESERVE (150000 chunks for the vector phases),
# STORE_CORES_CLIENTS (client processes; 0: the cores PostgreSQL is not given), STORE_CORES_LIMIT_S (320: the whole bench, then SIGINT),
# STORE_CORES_ROOT (a fresh folder for PostgreSQL), PYTHON (python3).
set -u
OUT=${OUT:-/tmp/store_cores_out}
mkdir -p "$OUT"
LOG="$OUT/store_cores.log"
PY=${PYTHON:-python3}
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
say "/dev/shm: $(df -h /dev/shm 2>/dev/null | tail -1)"
say "store_cores.sh on $(hostname): $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  say "installing $(ls .whl/*.whl | wc -l) wheels from .whl/ into /tmp/site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$LOG" 2>&1 || say "wheel install FAILED (see above); trying anyway"
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}
ROOT=${STORE_CORES_ROOT:-/tmp/store_cores_pg}
rm -rf "$ROOT"
"$PY" -c "import asyncpg, pgvector, pydantic_settings, devstack.postgres as p; print(p._bin_dir()); import shared.settings, services.parser.store, services.retriever.engine" \
  >>"$LOG" 2>&1 && say "imports ok" || say "imports FAILED (see the log); trying anyway"
say "bench/store_cores.py starting"
timeout -s INT -k 15 "${STORE_CORES_LIMIT_S:-320}" "$PY" -u bench/store_cores.py --root "$ROOT" \
  --cores "${STORE_CORES_CORES:-4,8,16}" --statements "${STORE_CORES_STATEMENTS:-1,2}" \
  --chunks "${STORE_CORES_CHUNKS:-150000}" --load-s "${STORE_CORES_LOAD_S:-90}" \
  --step-s "${STORE_CORES_STEP_S:-8}" --vector-s "${STORE_CORES_VECTOR_S:-6}" --reserve-chunks "${STORE_CORES_RESERVE:-150000}" \
  --client-procs "${STORE_CORES_CLIENTS:-0}" --json-out "$OUT/store_cores.json" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
say "bench exit $rc (124/130: cut at the time limit; the JSON holds what was measured)"
tail -n 40 "$ROOT/postgres/log/postgres.log" >"$OUT/postgres_tail.log" 2>/dev/null || true
pgrep -a postgres | head -3 >>"$LOG" 2>&1 || true
exit 0
