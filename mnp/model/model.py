"""The Multimodal Neural Process (MNP) as a :class:`~mnp.framework.routine.Routine`.

Data flow per batch: context memory (eqs. 2–3) -> projection and encoders r, s, u, q (eqs. 4, 6) ->
attention (eq. 9) -> target-specific r*, s* (eq. 5) -> aggregation (eq. 8) -> decoder and Monte Carlo
predictions (eqs. 11–13) -> L = L_TY (eq. 14) + β L_RBF (eq. 10) -> optimiser step -> memory update.

The projection, encoding, attention and eq. 8′'s view weights are in :mod:`mnp.model.forward`; the optimisers,
the warm-up and the training step in :mod:`mnp.model.training`; the inference cache of the context encodings in
:mod:`mnp.model.context_cache`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor
from torch.profiler import record_function

import mnp.model.parts as parts
from mnp.checks import choice
from mnp.eval import metrics
from mnp.framework.routine import Routine
from mnp.model.aggregation import modality_draws
from mnp.model.context_cache import ContextEncodingCache
from mnp.model.decoder import sample_logits
from mnp.model.encoders import EncoderStacks, glorot_, stacked_roles
from mnp.model.forward import MNPForward
from mnp.model.inference_settings import set_inference_settings
from mnp.model.losses import predictive_nll, unimodal_error
from mnp.model.memory import gather_candidates
from mnp.model.parts import PARTS, MNPSpec, as_part, plain
from mnp.model.training import MNPTraining
from mnp.model.view_predictions import view_softmaxes
from mnp.model.view_training import fusion_weights, predictive_loss
from mnp.model.view_weighting import DistanceWeighting, check_view_weighting
from mnp.runs.migrations import refusing_flat


class MNP(MNPForward, MNPTraining, Routine):
    """Multimodal Neural Process, built from its parts (:mod:`mnp.model.parts`); every deviation between paper and
    official code is a switch of one part.

    ``encoder`` (projection, r/s/u/q encoders, eqs. 4 and 6), ``attention`` (eq. 9), ``aggregation`` (eq. 8, with
    eq. 8′'s ``view_weighting`` and the training-time ``modality_mask`` and ``view_dropout``), ``memory`` (the DCM,
    eqs. 2–3), ``decoder`` (eqs. 11–13), ``loss`` (eqs. 10 and 14), ``optim`` and ``warmup``: each a part object, a
    mapping of its settings (a config node) or None (its defaults, the paper's choices except the attention's
    ``lengthscale_form="l"``: with l = 10 the paper's l² form leaves the attention uniform; ``conf/model/mnp.yaml``
    adds the measured projection and warm-up). ``model.spec`` holds them as read.

    Implementation (same math either way): ``fast`` (fused Adam, foreach clipping and L2, the
    modalities' projections, context encoders and lengthscales batched (mnp.model.stacked), context
    encodings computed once per parameter state at inference, partial sorts in sparsemax on CPU) or
    the straightforward reference (``fast=False``, kept for the regression tests and the benchmark's
    before/after); ``compile``: torch.compile the decoder sampling and the NLL (measured 2× slower
    on this project's 2-core CPU, for GPUs). :meth:`train_step` is the training step without host
    syncs (``capturable`` turns off the CPU-only partial sort), docs/gpu.md; ``cuda_graph`` (set from
    ``accel.cuda_graph``) replays it and the DCM update as CUDA graphs (:mod:`mnp.model.step_graphs`).
    """

    # each part's declared domains (mnp.framework.domains), checked by the part and by the config validation
    domains = {name: part.domains for name, part in PARTS.items()}

    @refusing_flat
    def __init__(
        self,
        num_classes: int,
        view_dims: Sequence[int],
        encoder: parts.EncoderPart | Mapping | None = None,
        attention: parts.AttentionPart | Mapping | None = None,
        aggregation: parts.AggregationPart | Mapping | None = None,
        memory: parts.MemoryPart | Mapping | None = None,
        decoder: parts.DecoderPart | Mapping | None = None,
        loss: parts.LossPart | Mapping | None = None,
        optim: parts.OptimPart | Mapping | None = None,
        warmup: parts.WarmupPart | Mapping | None = None,
        weight_init: str = "glorot",
        fast: bool = True,
        compile: bool = False,
    ):
        super().__init__(num_classes, view_dims)
        given = dict(
            encoder=encoder,
            attention=attention,
            aggregation=aggregation,
            memory=memory,
            decoder=decoder,
            loss=loss,
            optim=optim,
            warmup=warmup,
        )
        self.spec = MNPSpec(
            **{name: as_part(PARTS[name], value, name) for name, value in given.items()},
            weight_init=weight_init,
            fast=fast,
            compile=compile,
        )
        spec = self.spec
        # plain settings only: a checkpoint's constructor arguments (mnp.runs.stored_config)
        self.save_hyperparameters(
            {
                "num_classes": num_classes,
                "view_dims": list(self.view_dims),
                **{name: plain(getattr(spec, name)) for name in PARTS},
                "weight_init": weight_init,
                "fast": fast,
                "compile": compile,
            }
        )
        self.automatic_optimization = False
        choice("weight_init", weight_init, ("glorot", "torch"))
        check_view_weighting(spec.aggregation.view_weighting.mode, spec.attention.similarity)
        self.attention_norm = spec.attention.normaliser
        self.encoders = spec.encoder.build(self.view_dims, self.num_classes)
        self.similarity = spec.attention.build([e.d_x for e in self.encoders])
        self.aggregation = spec.aggregation.build(len(self.view_dims), spec.encoder.d_e)
        self.view_weighting = DistanceWeighting(self.similarity)  # eq. 8′
        if spec.aggregation.view_weighting.mode == "distance":  # its d²_ref, in checkpoints
            self.register_buffer("distance_ref", torch.full((len(self.view_dims),), float("nan")))
        self.decoder = spec.decoder.build(spec.encoder.d_e, self.num_classes, spec.encoder)
        if weight_init == "glorot":
            glorot_(self)
        self.memory = spec.memory.build(self.view_dims, self.num_classes)
        if spec.warmup.epochs > 0 and not self._warmup_parameters():
            raise ValueError("warmup.epochs > 0 needs something for L_RBF to train: an rbf similarity or a projection")
        self._dcm_batch: tuple | None = None
        # fast: the linear projections and the context encoders of all modalities batched (mnp.model.stacked), where
        # their shapes allow it and the aggregation uses every encoder (an unused one must keep no gradient,
        # not a zero one)
        self.encoder_stacks = EncoderStacks(
            self.encoders,
            projection=fast and spec.encoder.projection == "linear" and len(self.view_dims) > 1,
            context=fast and spec.aggregation.kind == "mba" and stacked_roles(self.encoders) is not None,
        )
        if fast and hasattr(self.similarity, "stack"):
            self.similarity.stack = True
        self.context_cache = ContextEncodingCache(self.encoders, self.memory)  # at inference, on the fast path
        self._sparsemax_k: int | None = None  # partial-sort size hint (exact either way), see topk_hint
        self._compiled = None  # torch.compile'd _decode_and_nll when compile=True
        # True: the training step makes no host sync (no CPU partial sort in sparsemax, whose size is read from
        # the last attention); what CUDA-graph capture needs, and what mnp.tools.bench.step_metrics measures. On a GPU the
        # step makes none either way.
        self.capturable = False
        # accel.cuda_graph: False | True (the training step and DCM update as CUDA graphs) | "emulate" (the same
        # bookkeeping without graphs, any device); set by the pipeline, acted on in on_fit_start (mnp.model.step_graphs)
        self.cuda_graph: bool | str = False
        self._step_graphs = None  # mnp.model.step_graphs.StepGraphs, from on_fit_start while a step is captured
        self.register_buffer(
            "_loss_bad", torch.tensor(0.0), persistent=False
        )  # 1 after a non-finite loss, see train_step
        if spec.aggregation.modality_mask:
            self.register_buffer("_modality_subsets", modality_draws(len(self.view_dims)), persistent=False)

    # ------------------------------------------------------------------ memory
    def init_memory(self, train_views: Sequence[Tensor], train_y: Tensor) -> None:
        """Fill the context memory with N_K random training samples per class (plain-Python path)."""
        self.memory.init_from_data(train_views, train_y)
        self.memory.attach(train_views, train_y)

    def _training_set(self):
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None or not hasattr(dm, "train_views"):
            return None
        return dm.train_views, dm.train_y

    def on_test_start(self) -> None:
        if self.memory._source is None and (data := self._training_set()) is not None:
            self.memory.attach(*data)

    # ------------------------------------------------------------------ model contract
    def predict(self, views, present=None):
        """Per-sample softmaxes (S·S, B, K) of the multimodal prediction (eq. 12) and the expected entropy;
        ``present`` (B, M): eq. 8 over the views present only (its weights, mnp.eval.missing)."""
        _, scores, _, r_star, s_star, u, q = self._attend_scores(views)
        mu, var = self.aggregation(
            r_star, s_star, u, q, self._view_weights(scores, present)
        )  # eq. 8 (8′ when weighted)
        dec = self.spec.decoder
        logits = sample_logits(self.decoder, mu, var, dec.prediction_samples, dec.sigma_as_std, self.sample_generator)
        probs = logits.float().softmax(-1)
        return probs, metrics.expected_entropy(probs)

    def view_predictions(self, views):
        """M per-sample softmaxes (S·S, B, K), view m's from its unimodal posterior alone (mnp.model.view_predictions)."""
        _, _, _, r_star, s_star, u, q = self._attend_scores(views)
        return view_softmaxes(
            self.aggregation, self.decoder, self.spec.decoder, r_star, s_star, u, q, self.sample_generator
        )

    def apply_inference_settings(self, settings: dict[str, dict], train_views: Sequence | None = None) -> None:
        """Set inference-only ``settings`` (:func:`mnp.model.inference_settings.inference_settings`) on the trained
        model; eq. 8′ set to distance mode gets its d²_ref from ``train_views`` (else the checkpoint's stays)."""
        set_inference_settings(self, settings, train_views)

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        if self.spec.aggregation.view_weighting.mode == "distance" and not self.in_warmup():
            self.update_distance_reference()  # before the epoch's checkpoint (ModelCheckpoint runs after this hook)

    def clear_context_cache(self) -> None:
        """Drop the cached context encodings (mnp.model.context_cache): after writing parameters through ``.data``."""
        self.context_cache.clear()

    def train(self, mode: bool = True):
        if mode:
            self.context_cache.clear()
        return super().train(mode)

    def training_loss(self, views, y):
        hold = getattr(self.similarity, "hold", None)
        if hold is None:
            return self._training_loss(views, y)
        hold()  # the lengthscales once for the attention, L_RBF, the penalty and the log
        try:
            return self._training_loss(views, y)
        finally:
            self.similarity.release()

    def _training_loss(self, views, y):
        spec = self.spec
        fusion, loss_part, memory = spec.aggregation, spec.loss, spec.memory
        if self.in_warmup():
            rbf = self._rbf_loss(self._project(views), y)
            return rbf, {"rbf": rbf.detach()}
        targets, attn, r_star, s_star, u, q = self._attend(views)
        weights = fusion_weights(
            y.shape[0],
            len(views),
            y.device,
            fusion.modality_mask,
            fusion.view_dropout,
            getattr(self, "_modality_subsets", None),
        )
        (mu, var), (mu_m, var_m) = self.aggregation.posteriors(r_star, s_star, u, q, weights)
        mu_all = torch.cat([mu[None], mu_m])  # (1 + M, B, d): multimodal first, then each modality
        var_all = None if var is None else torch.cat([var[None], var_m])
        with record_function("mnp.decode"):
            if spec.compile and self._compiled is None:
                self._compiled = torch.compile(self._decode_and_nll)
            logits, nll = (self._compiled or self._decode_and_nll)(mu_all, var_all, y)  # nll: (1 + M,)
        with record_function("mnp.losses"):
            ty, view_nll = predictive_loss(nll, loss_part.view_weight)  # eq. 14 (+ λ · the views' mean NLL)
            rbf = self._rbf_loss(targets, y)
            l2 = self._l2_penalty()
            loss = ty + loss_part.beta * rbf + l2
        probs = logits.detach().float().softmax(-1).mean(0)  # p̂ and p̂^m, (1 + M, B, K)
        if memory.update in ("mse", "ce", "fifo"):
            err = unimodal_error(probs[1:], y, memory.update) if memory.update != "fifo" else None
            self._dcm_batch = ([v.detach() if v.requires_grad else v for v in views], y, attn.detach().sum(1), err)
        logs = {"ty": ty.detach(), "rbf": rbf.detach(), "acc": (probs[0].argmax(-1) == y).float().mean()}
        if loss_part.l2:
            logs["l2"] = l2.detach()
        if loss_part.view_weight:
            logs["view_nll"] = view_nll.detach()
        if spec.attention.similarity == "rbf":
            stacked = self.similarity.stacked_lengthscales()
            logs["lengthscale"] = (
                torch.cat([l.detach() for l in self.similarity.lengthscales()]).mean()
                if stacked is None
                else stacked.detach().mean()
            )
        return loss, logs

    def _decode_and_nll(self, mu_all: Tensor, var_all: Tensor | None, y: Tensor) -> tuple[Tensor, Tensor]:
        """Logit samples of every posterior (eqs. 11–13) and their NLLs (eq. 14)."""
        dec = self.spec.decoder
        logits = sample_logits(self.decoder, mu_all, var_all, dec.num_samples, dec.sigma_as_std)
        return logits, predictive_nll(logits, y, self.spec.loss.ty, self.spec.loss.label_smoothing)

    def __getstate__(self):
        return {**super().__getstate__(), "_compiled": None, "_step_graphs": None}

    # ------------------------------------------------------------------ DCM update (eqs. 2–3)
    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        if self._step_graphs is not None:  # a captured step: its DCM update is a graph too
            self._step_graphs.update_memory()
        else:
            self.update_context_memory()  # memory_write=after_step (paper); with before_step nothing is left to write

    def drop_memory_update(self) -> None:
        """Forget the batch the last training step left for the DCM update (a measured step, not trained on)."""
        self._dcm_batch = None

    def update_context_memory(self) -> None:
        """The DCM update (eqs. 2–3) with the batch the last training step left, as ``on_train_batch_end`` runs it."""
        cached, self._dcm_batch = self._dcm_batch, None
        if cached is not None:
            world = 1 if self._trainer is None else self.trainer.world_size
            self.memory.update(*gather_candidates(self.all_gather, world, *cached))
