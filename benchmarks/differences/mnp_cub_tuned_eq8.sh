#!/bin/bash
# What eq. 8' costs MNP at its tuned CUB defaults (issue 44): the ten paper_tuned checkpoints (seeds 0-9) read again
# with eq. 8 (model.aggregation.view_weighting.mode=none) by evaluate.py, the test split read once more (a diagnosis,
# no decision), then their records: results/differences/mnp_cub_tuned_eq8/ (docs/results.md, At the tuned defaults).
# usage: bash benchmarks/differences/mnp_cub_tuned_eq8.sh LOG_DIR   (from the repo root; MNP_DATA_DIR set; LOG_DIR
# holds paper_tuned/multiruns/mnp_cub_s0..s9 of python train.py -m experiment=paper_tuned dataset=cub model=mnp)
set -euo pipefail
logs=${1:?usage: mnp_cub_tuned_eq8.sh LOG_DIR}
for seed in $(seq 0 9); do
  python evaluate.py ckpt_path="$logs/paper_tuned/multiruns/mnp_cub_s$seed/checkpoints/last.ckpt" \
    +model.aggregation.view_weighting.mode=none
done
python -m mnp.tools.report "$logs/paper_tuned/multiruns" --out results/differences/mnp_cub_tuned_eq8 \
  --seeds 0 1 2 3 4 5 6 7 8 9 --models mnp --evaluations --no-plots
