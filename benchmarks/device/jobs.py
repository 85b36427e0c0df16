"""The jobs of the device sweep behind docs/results.md, one `train.py -m` argument list per line, longest and most needed first."""
S5, S3 = range(5), range(3)
pm = "experiment=paper_main"
jobs = []
for d in ("scene15", "pie", "cub", "handwritten"):           # the fidelity issue's table: mnp, mnp_official × 5 seeds
    for s in S5:
        for m in ("mnp", "mnp_official"):
            jobs.append(f"{pm} model={m} dataset={d} seed={s}")
sw = "experiment=switches model=mnp"
for d in ("scene15", "cub"):
    for s in S3:
        jobs.append(f"{sw} dataset={d} seed={s} model.warmup_lr=0.01")
for s in S5:                                                   # baselines: unchanged code, first committed as data
    for d in ("scene15", "pie", "cub", "handwritten"):
        for m in ("mgp", "tmc", "etp", "sngp", "mcd", "de_ef", "de_lf"):
            jobs.append(f"{pm} model={m} dataset={d} seed={s}")
for s in S3:
    for d in ("pie", "cub", "handwritten"):
        jobs.append(f"{sw} dataset={d} seed={s} model.modality_mask=true")
        jobs.append(f"{sw} dataset={d} seed={s} model.train_decoder=false")
        jobs.append(f"{sw} dataset={d} seed={s} model.lengthscale_lr_scale=10")
    jobs.append(f"{sw} dataset=pie seed={s} model.rbf_reduce=mean model.self_in_denominator=false model.lengthscale_penalty=norm")
    jobs.append(f"{sw} dataset=cub seed={s} model.rbf_reduce=sum model.self_in_denominator=true model.lengthscale_penalty=half_sq")
for s in S3:
    jobs.append(f"{sw} dataset=scene15 seed={s} model.modality_mask=true")
    jobs.append(f"{sw} dataset=scene15 seed={s} model.train_decoder=false")
    jobs.append(f"{sw} dataset=scene15 seed={s} dataset.scale_test_separately=true")
print("\n".join(jobs))
