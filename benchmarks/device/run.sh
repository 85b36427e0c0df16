#!/bin/bash
# One device session (docs/gpu.md): checks for the GPU issue, then the prioritised sweep of jobs.py, 15
# train.py processes at a time, until DEADLINE seconds; then one tar of the run dirs without checkpoints.
# Needs .gpu/pylib (hydra, omegaconf, antlr4, entmax copied from a venv) and .gpu/data (the data files),
# both carried to the device machine.
# usage: [STAGE=select|final] bash benchmarks/device/run.sh DEADLINE PARALLEL   (from the repo root)
# STAGE=select (benchmarks/device/jobs.py): the selection runs keep their checkpoints, and the decision records
# are written on the device into $OUT/decisions (benchmarks/device/decide.py); final (default): the reported runs.
T0=$(date +%s); DEADLINE=${1:-530}; P=${2:-15}
export PYTHONPATH=$PWD/.gpu/pylib:$PWD PYTHONUNBUFFERED=1 MNP_DATA_DIR=$PWD/.gpu/data MNP_TORCH_THREADS=1 \
       WANDB_MODE=disabled MNP_CACHE_DIR=/tmp/mnpcache HYDRA_FULL_ERROR=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/aux
el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
python3 -c "import torch, pytorch_lightning as pl, hydra, omegaconf, entmax, gpytorch; print('torch', torch.__version__, 'pl', pl.__version__, 'cuda', torch.cuda.is_available())"
git log -1 --format='commit %H' 2>/dev/null || true
FAST=""
if [ -z "$SKIP_CHECKS" ]; then
if timeout 60 python3 train.py model=mnp dataset=handwritten experiment_name=smoke trainer.max_epochs=3 \
     model.warmup.epochs=1 > $OUT/aux/smoke.log 2>&1; then el "smoke ok"; tail -12 $OUT/aux/smoke.log
else el "smoke FAILED, sweep with model.fast=false"; tail -30 $OUT/aux/smoke.log; FAST="model.fast=false"; fi
timeout 50 python3 benchmarks/device/step_capture.py --json $OUT/step_capture.json 2>&1 | tee $OUT/aux/step_capture.log; el "step capture done"
timeout 40 python3 -m mnp.tools.bench --dataset handwritten --models mnp mnp_ref mgp mlp --no-graph-breaks \
   --json $OUT/bench_cuda_handwritten.json > $OUT/aux/bench1.log 2>&1; el "bench 1 rc=$?"
timeout 55 python3 -m mnp.tools.bench --dataset cub pie scene15 cifar10c --models mnp mgp --no-graph-breaks \
   --no-step-metrics --json $OUT/bench_cuda.json > $OUT/aux/bench2.log 2>&1; el "bench 2 rc=$?"
grep -E "^\| |train .*test" $OUT/aux/bench1.log $OUT/aux/bench2.log | head -40
fi
STAGE=${STAGE:-final}; CKPT="callbacks.checkpoint.every_n_epochs=0"; [ "$STAGE" = select ] && CKPT=""
if [ -n "$JOBS" ]; then cp $JOBS /tmp/jobs.txt; else python3 benchmarks/device/jobs.py $STAGE > /tmp/jobs.txt; fi; el "sweep: $(wc -l < /tmp/jobs.txt) jobs, $P at a time"
mkdir -p $OUT/aux/jobs
( i=0; while read -r line; do i=$((i+1)); echo "$i $line"; done < /tmp/jobs.txt ) | \
  xargs -P $P -L 1 bash -c 'n=$0; python3 train.py -m "$@" '"$CKPT $FAST"' > '"$OUT"'/aux/jobs/$n.log 2>&1; echo "[job $n rc=$?] $*"' &
XP=$!
while kill -0 $XP 2>/dev/null && [ $(( $(date +%s) - T0 )) -lt $DEADLINE ]; do sleep 5; done
el "deadline or done; stopping"
pkill -f "xargs -P" ; pkill -f "train.py -m"; sleep 3; pkill -9 -f "train.py -m"
el "finished: $(find logs -name metrics.json | wc -l) metrics.json, $(find logs -name failed.json | wc -l) failed.json"
for f in $(find logs -name failed.json | head -5); do echo "== $f"; head -c 600 $f; echo; done
[ "$STAGE" = select ] && { python3 benchmarks/device/decide.py logs/select --out $OUT/decisions; el "decisions rc=$?"; }
tar czf - --exclude=checkpoints --exclude='*.ckpt' logs $OUT/aux 2>/dev/null | split -b 15M - $OUT/runs.tgz.
ls -la $OUT; el "end"
