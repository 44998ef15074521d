#!/bin/bash
# run bench/long_queries.py on a kept store: run_lq.sh STORE MB ROUNDS OUT
cd /work/main
EVIDENTIA_RETRIEVAL_BM25_CACHE_MB=$2 .venv/bin/python - "$1" "$3" $5 > "$4" 2>&1 <<'PY'
import subprocess, sys
from pathlib import Path
sys.path.insert(0, "bench")
from scale import database
with database(Path(sys.argv[1])) as url:
    subprocess.run([".venv/bin/python", "bench/" + (sys.argv[3] if len(sys.argv) > 3 else "long_queries.py"), "--database-url", url] + (["--rounds", sys.argv[2]] if len(sys.argv) <= 3 else ["--seed", sys.argv[2]]), check=True)
PY
