#!/bin/bash
# Short runs of mnp and mnp_official on the four real datasets (and one on validation rows), seed 3, from the code in
# <worktree>; run it on two commits, then compare with benchmarks/same_runs.py (issue 33's bit-for-bit proof).
#   bash benchmarks/same_runs.sh <worktree of commit A> <out A>; bash benchmarks/same_runs.sh <worktree B> <out B>
#   python benchmarks/same_runs.py <out A> <out B> --out benchmarks/parts_bit_identity.json
set -euo pipefail
wt=$(cd "$1" && pwd); mkdir -p "$2"; out=$(cd "$2" && pwd)
cd "$wt"
while read -r job; do
  name=$(echo "$job" | tr ' =' '_-')
  PYTHONPATH="$wt" python train.py $job seed=3 hydra.run.dir="$out/$name" logger=csv > "$out/$name.log" 2>&1
  echo "$job rc=$?"
done <<'JOBS'
model=mnp dataset=handwritten trainer.max_epochs=4
model=mnp dataset=cub trainer.max_epochs=6
model=mnp dataset=pie trainer.max_epochs=6
model=mnp dataset=scene15 trainer.max_epochs=3
model=mnp_official dataset=cub trainer.max_epochs=6
model=mnp_official dataset=handwritten trainer.max_epochs=4
model=mnp dataset=cub trainer.max_epochs=6 dataset.val_fraction=0.2
JOBS
