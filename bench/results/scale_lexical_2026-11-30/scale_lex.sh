#!/bin/bash
# bench/scale.py --modes lexical on the kept stores, pruning off then on: 10^6 (cache default 768 MB), 3x10^6 (1536 MB)
cd /work/scalerun; export PYTHONPATH=/work/scalerun
OUT=bench/results/scale_lexical_2026-11-30
mkdir -p $OUT
run() {  # name root chunks cache extra...
  local name=$1 root=$2 chunks=$3 cache=$4; shift 4
  EVIDENTIA_RETRIEVAL_BM25_CACHE_MB=$cache .venv/bin/python bench/scale.py --chunks $chunks --root $root --modes lexical \
    --real-vectors 100 --cache-dir /tmp/wand-scale-cache --json-out $OUT/$name.json "$@" > $OUT/$name.log 2>&1
  echo "rc=$?" >> $OUT/$name.log
}
run scale_1m /work/store1m 1000000 768 --long-query-rounds 2
run scale_3m /work/store 3000000 1536 --long-query-rounds 2
run scale_1m_pruned /work/store1m 1000000 768 --long-query-rounds 1 --bm25-pruning
run scale_3m_pruned /work/store 3000000 1536 --long-query-rounds 1 --bm25-pruning
