# Shared by the selection scripts: `source "$(dirname "$0")/lib.sh" "$@"` reads their arguments (STAGE LOG_DIR)
# into stage and logs, refusing a stage the script does not declare (its stages) and a run outside the repository
# root; each script sets out, its decision record.
set -euo pipefail
stage=${1:?the stage: train or decide, as the script header says}; logs=${2:?the log directory}  # $3: the chosen variant, where a script takes one
# each script declares its stages (stages="..."): any other is refused before a job starts
known=; for s in ${stages:?the script declares its stages}; do [ "$s" = "$stage" ] && known=1; done
if [ -z "$known" ]; then echo "error: unknown stage '$stage' of $(basename "$0"); its stages: $stages" >&2; exit 2; fi
# the jobs run train.py and the records go to results/decisions/, both relative to the repository root
if [ ! -f train.py ] || [ ! -d results/decisions ]; then
  echo "error: run $0 from the repository root (where train.py and results/decisions/ are), not from $PWD" >&2; exit 2
fi
export MNP_TORCH_THREADS=1
# screen_train DATASET "SEEDS" CANDIDATE...: every candidate (a string of overrides; "" = the defaults) at every
# seed as an experiment=select run, seed by seed, two jobs at a time
screen_train() {
  local dataset=$1 seeds=$2 s c; shift 2
  for s in $seeds; do for c in "$@"; do
    echo "experiment=select model=mnp dataset=$dataset seed=$s paths.log_dir=$logs${c:+ $c}"  # no trailing blank:
    # xargs -L joins a line that ends in one to the next
  done; done | xargs -P 2 -L 1 python train.py
}
# decide DATASET ARGS...: one decision record of mnp.tools.select (by val NLL unless ARGS say otherwise)
decide() { local dataset=$1; shift; python -m mnp.tools.select decide "$logs" --model mnp --dataset "$dataset" --out "$out" "$@"; }
# calibration_decide DATASET DECISION SETTING ARGS...: one of issue 31's calibration decisions, the variants whose
# overrides contain model.SETTING against the defaults by val ECE under the rule declared before the runs, p < 0.05
calibration_decide() {
  local dataset=$1 decision=$2 setting=$3; shift 3
  decide "$dataset" --decision "$decision" --match "model.$setting" --criterion val/ece --require-p 0.05 "$@"
}
# weighting DATASET ARGS...: eq. 8′'s q and p by val noisy accuracy on one setting's checkpoints (--base VARIANT;
# default the defaults')
weighting() {
  local dataset=$1; shift
  python -m mnp.tools.select infer "$logs" --model mnp --dataset "$dataset" --decision view_weighting \
    --criterion val/noise/acc_mean --higher --out "$out" "$@"
}
# official DATASET "SEEDS" [decide ARGS...]: the authors' whole configuration (model=mnp_official at its defaults)
# as one more candidate against today's mnp defaults (--base VARIANT where a decided variant holds them): its
# experiment=select runs, two jobs at a time, then the decision `configuration` by val NLL
official() {
  local dataset=$1 seeds=$2 s; shift 2
  for s in $seeds; do echo "experiment=select model=mnp_official dataset=$dataset seed=$s paths.log_dir=$logs"; done |
    xargs -P 2 -L 1 python train.py
  decide "$dataset" --decision configuration --rival mnp_official "$@"
}
# samples DATASET ARGS...: the decoder's S at prediction (decoder.eval_samples, issue 31's calibration candidate) by
# val NLL on one setting's checkpoints (--base VARIANT; default the defaults')
samples() {
  local dataset=$1; shift
  python -m mnp.tools.select infer "$logs" --model mnp --dataset "$dataset" --decision eval_samples \
    --samples 5 10 20 --criterion val/nll --out "$out" "$@"
}
