"""The HN-CLIP fine-tuner for any model family whose adapter declares its towers (open_clip, HF CLIP, ...): it
asks the family (:class:`~hnbench.models.family.ModelFamily`) and never branches on its name.

AdamW with linear warm-up and cosine decay, gradient accumulation (per-micro-batch loss or cached
features, see :mod:`hnbench.train.step`), AMP on CUDA, gradient clipping, tower locking, LoRA/DoRA,
Long-CLIP stretching, ``torchrun`` data parallelism, seeded and resumable, periodic evaluation (a callable
the caller hands in, :data:`PeriodicEval`: :func:`hnbench.train.train` builds it with hnbench's evaluator, so
this module never imports the evaluation) and the saturation diagnostics. Writes into the output directory:

* the family's export (:meth:`~hnbench.models.family.ModelFamily.export`: ``checkpoint.safetensors`` for open_clip,
  ``hf_model/`` for HF CLIP; merged weights under PEFT), loadable by ``hnbench eval``; ``adapter/`` for
  adapter-only PEFT checkpoints;
* ``train_config.json`` (the exact recipe that ran), ``log.jsonl`` (one line per logged step),
  ``diagnostics.jsonl`` (step / epoch / eval records), ``eval/`` (result files), ``last/`` (resume state).

``batch_size`` is the *global* micro-batch (the pairs one loss sees), split evenly over processes; an epoch's
last batch holds the images left over (``last_batch``, :func:`~hnbench.train.batches.epoch_batch_sizes`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from hnbench.data import load_dataset
from hnbench.distributed import DistContext, default_num_workers, from_env
from hnbench.errors import ConfigError
from hnbench.io import append_line, atomic_write_bytes
from hnbench.models import load_model
from hnbench.models.base import TrainableEncoder, require_trainable, state_dict_fingerprint
from hnbench.models.family import check_trusted, family_of
from hnbench.models.longclip_tables import KEEP
from hnbench.models.towers import CLIPTowers, bpe_encode, freeze_position_rows, param_groups
from hnbench.registry import LOSSES, OBJECTIVES
from hnbench.sidecars.edges import require_edges
from hnbench.sidecars.segments import default_sidecar_path, require_segments
from hnbench.train.adapters import apply_peft
from hnbench.train.batches import (
    EdgeItems,
    GlobalBatchSampler,
    PairItems,
    SegmentItems,
    SegmentPlan,
    batch_note,
    group_positions,
    subset_fraction,
)
from hnbench.train.config import TrainConfig, load_recipe  # noqa: F401  (load_recipe: re-exported)
from hnbench.train.diagnostics import measure, summarize_epoch
from hnbench.train.export import export_checkpoints
from hnbench.train.objective_options import FilterOptions, StructXLIPTermOptions
from hnbench.train.objectives import check_inputs
from hnbench.train.report import r1_summary
from hnbench.train.rundir import MANIFEST, check_run_dir, claim, clear_recorded, locked
from hnbench.train.state import (
    STATE_DIR,
    WRITE_ERRORS,
    TrainState,
    load_state,
    resolve_resume,
    save_state,
    trim_jsonl,
    write_failed,
)
from hnbench.train.step import MicroBatch, Objective, run_step
from hnbench.train.terms.lexicon import filter_caption
from hnbench.validate import check_device

logger = logging.getLogger(__name__)

# the batch inputs this trainer produces when an objective's terms declare them (objectives.INPUTS)
_RUN_INPUTS = frozenset({"pixels", "tokens", "global_features", "image_ids", "token_features", "token_features_cls",
                         "token_states", "segments", "edge_maps", "filtered_captions"})
_SIDE_INPUTS = frozenset({"segments", "edge_maps", "filtered_captions"})  # made from the data, beside (image, caption)


class PeriodicEval(Protocol):
    """A run's periodic evaluation (``eval_dataset``), handed to :func:`train` by its caller: called on rank 0
    after every ``eval_every`` epochs (and before training with ``eval_at_start``) with the encoder holding the
    current weights (its info names them: this run after that epoch) on ``device``, the epoch and the folder its
    result goes to; returns the fields of the run's ``diagnostics.jsonl`` eval record (the data, the result's
    path, its scores)."""

    def __call__(self, encoder: TrainableEncoder, *, device: str, epoch: int, output_dir: Path) -> dict[str, Any]: ...


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def cosine_lr(step: int, total: int, base: float, warmup: int) -> float:
    """Linear warm-up to ``base`` over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * base * (1 + math.cos(math.pi * min(1.0, progress)))


def train(config: TrainConfig, *, progress: bool = True, evaluate: PeriodicEval | None = None) -> Path:
    """Run one training job (one process, or one rank under ``torchrun``); returns the checkpoint path.

    ``evaluate``: the periodic evaluation of ``config.eval_dataset`` (:class:`PeriodicEval`; a config with an
    ``eval_dataset`` needs one: :func:`hnbench.train.train` builds it with hnbench's evaluator). Under
    ``torchrun`` the process group follows :mod:`hnbench.distributed`'s timeout policy
    (``HNBENCH_DIST_TIMEOUT_S``, default 6 hours): the other ranks wait that long for rank 0's evaluation.
    """
    config.validate()
    if config.eval_dataset and evaluate is None:
        raise ConfigError(f"eval_dataset {config.eval_dataset!r} needs a periodic evaluation: train with "
                          "hnbench.train.train (it evaluates with hnbench's evaluator), or pass evaluate=")
    check_device(config.device)  # here, not in validate(): a recipe may be written for another machine's GPU
    check_trusted(config.model, config.pretrained, config.trust_remote_code)  # remote code: before anything loads
    family_of(config.model).check_training(config.model)
    out = Path(config.output)
    resume, overwrite = bool(config.resume), config.overwrite
    # before the lock file is made: a refused folder gets nothing
    check_run_dir(out, resume=resume, overwrite=overwrite)
    created = _first_missing(out)
    dist = from_env(config.device)
    try:
        with locked(out, resume=resume, overwrite=overwrite) if dist.is_main else contextlib.nullcontext():
            return _Run(config, dist, progress, evaluate).run()
    except BaseException:
        if created is not None and dist.is_main and _nothing_of_value(created):
            shutil.rmtree(created, ignore_errors=True)  # a failed start leaves no empty run directory behind
        raise
    finally:
        dist.close()


def _first_missing(path: Path) -> Path | None:
    """The outermost directory of ``path`` that does not exist yet (None if it exists)."""
    missing = None
    for p in (path, *path.parents):
        if p.exists():
            return missing
        missing = p
    return missing


def _nothing_of_value(root: Path) -> bool:
    """Only directories, empty files and the run manifest under ``root`` (what a run leaves when it fails
    before training)."""
    return all(p.is_dir() or p.name == MANIFEST or p.stat().st_size == 0 for p in root.rglob("*")) \
        if root.is_dir() else True


class _Run:
    """One training run: builds everything in a fixed order (it decides the RNG stream), then loops."""

    def __init__(self, config: TrainConfig, dist: DistContext, progress: bool,
                 evaluate: PeriodicEval | None = None) -> None:
        self.config, self.dist, self.progress, self.periodic = config, dist, progress, evaluate
        self.side_record: dict[str, Any] = {}
        # the steps in this order: it decides the RNG stream (the model's initialisation follows the seed)
        seed_everything(config.seed)
        self._build_objective()
        self.ds: Any = None
        self._check_side_inputs()  # the side inputs are checked before any model loads: the data first
        self.out_dir = Path(config.output)
        self._build_towers()
        if self.ds is None:
            self.ds = self._load_data()
        self._build_batches()
        self._build_optimizer()

    def _build_objective(self) -> None:
        """The objective's terms, and the refusals of what this run cannot give them."""
        c, dist = self.config, self.dist
        terms = OBJECTIVES.get(c.objective)(c)
        self.objective = Objective(LOSSES.get(c.loss), c.loss, c.gamma, c.label_smoothing, c.mask_duplicates,
                                   c.token_loss_weight, dist, terms=terms)
        check_inputs(self.objective.needs, _RUN_INPUTS | ({"g_text"} if c.g_source == "frozen_init" else set()),
                     c.objective)
        if self.objective.modules and dist.world_size > 1 and c.accum_mode == "cached":
            raise ConfigError(f"objective {c.objective!r} trains an extra module: under torchrun use "
                              "--accum-mode loss (cached features are one process only for it)")
        side = self.objective.needs & _SIDE_INPUTS
        if side and c.accum_mode == "cached" and c.accum_steps > 1:
            raise ConfigError(f"objective {c.objective!r} trains on side inputs ({', '.join(sorted(side))}), which "
                              "--accum-mode cached does not carry: use --accum-mode loss")

    def _check_side_inputs(self) -> None:
        """The segment sidecar and edge maps the terms declare (the data loaded for them), or one line each."""
        c = self.config
        side = self.objective.needs & _SIDE_INPUTS
        self.sidecar: Any = None
        self.edges: Any = None
        if not side:
            return
        self.ds = self._load_data()
        needed_by = f"--objective {c.objective}"
        if "segments" in side:  # GOAL trains one segment of every image; edge crops take what there is
            self.sidecar = require_segments(self.ds, c.segments, needed_by=needed_by,
                                            every_image="edge_maps" not in side)
        if "edge_maps" in side:
            self.edges = require_edges(self.ds, c.edge_settings(), needed_by=needed_by)

    def _build_towers(self) -> None:
        """The model (Long-CLIP stretch, frozen Ḡ copy, position rows, PEFT, locks) and the terms' modules."""
        c, device = self.config, self.dist.device
        encoder = load_model(c.model, c.pretrained, model_config=c.model_config,
                             context_length=c.context_length, device=device, init_seed=None,  # seeded above
                             trust_remote_code=c.trust_remote_code)
        self.encoder: TrainableEncoder = require_trainable(encoder, "training")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.family = family = family_of(c.model)  # everything family-specific below is the adapter's answer
        if c.stretch_context and self.encoder.info.context_length != c.stretch_context:
            self.encoder = require_trainable(family.stretch(self.encoder, c.stretch_context), "training")
        base_towers = CLIPTowers(self.encoder.model, family, max_logit_scale=c.max_logit_scale, encoder=self.encoder)
        if c.init_logit_scale is not None:
            with torch.no_grad():
                base_towers.model.logit_scale.fill_(math.log(c.init_logit_scale))
        uses_g = LOSSES.entry(c.loss).uses_g
        self.frozen = base_towers.frozen_text_copy() if c.g_source == "frozen_init" and uses_g else None
        if c.position_table == "frozen-20":
            freeze_position_rows(base_towers.model, KEEP)
        model = self.encoder.model
        if c.peft:
            model = apply_peft(model, family, c.peft, r=c.lora_r, alpha=c.lora_alpha, dropout=c.lora_dropout,
                               targets=c.lora_targets)
            self.encoder.model = model
        self.towers = CLIPTowers(model, family, max_logit_scale=c.max_logit_scale, encoder=self.encoder).train()
        self.towers.lock(image=c.lock_image, text=c.lock_text, logit_scale=not c.train_logit_scale)
        # the terms' trainable modules live beside the towers: checkpointed, resumed and exported with them
        self.towers.extra = torch.nn.ModuleDict({m.name: m.build(self.encoder.info.embed_dim).to(device).train()
                                                 for m in self.objective.modules})

    def _build_batches(self) -> None:
        """Captions tokenised, the global batch sampler, the items with their side inputs, the loader."""
        c, dist = self.config, self.dist
        if len(self.ds.images) < 2:  # batch_size >= 2 is checked up front; this is the same rule on the data
            left = " after --data-fraction" if c.data_fraction < 1 else ""
            n_images = f"{len(self.ds.images)} image{'' if len(self.ds.images) == 1 else 's'}"
            raise ConfigError(f"the training set has {n_images}{left}: a batch of one pair has no "
                              "in-batch negatives and the contrastive loss is constant (as with --batch-size 1); "
                              "train on at least 2 images")
        self.tokens = self.encoder.tokenize(self.ds.captions).tokens
        self.captions_of = self.ds.image_captions()
        n = len(self.ds.images)
        # the evaluation's rule (on the CPU only the cores the forward/backward leave free), no pool for one batch
        workers = min(default_num_workers(dist.device), n // c.batch_size) if c.num_workers is None else c.num_workers
        self.generator = torch.Generator().manual_seed(c.seed)
        groups = group_positions(self.ds.image_ids, c.group_by) if c.group_by else None
        self.sampler = GlobalBatchSampler(n, c.batch_size, last_batch=c.last_batch, generator=self.generator,
                                          rank=dist.rank, world_size=dist.world_size, groups=groups)
        if dist.is_main and (note := batch_note(n, c.batch_size, dist.world_size, c.last_batch)):
            # pairs left untrained are a warning; a smaller last batch is what a reader of the log wants to know
            (logger.warning if sum(self.sampler.sizes) < n else logger.info)("%s", note)
        self.plan: SegmentPlan | None = None
        self.filtered: list[str] | None = None
        if self.edges is not None:
            self.items: Any = self._edge_items()
        elif self.sidecar is not None:
            self.items = self._segment_items()
        else:
            self.items = PairItems(self.ds.images, self.encoder.image_transform)
        self.loader = torch.utils.data.DataLoader(self.items, batch_sampler=self.sampler, num_workers=workers,
                                                  generator=self.generator)
        self.micro_per_epoch = len(self.sampler)
        self.steps_per_epoch = math.ceil(self.micro_per_epoch / c.accum_steps)
        self.total = self.steps_per_epoch * c.epochs

    def _edge_items(self) -> EdgeItems:
        """StructXLIP's side inputs: edge maps, edge crops at the best segments' boxes, filtered captions (the
        crops per image and the lexicons: the objective's options where they are StructXLIP's, else theirs)."""
        options = self.config.objective_options
        top_k = options.top_k if isinstance(options, StructXLIPTermOptions) else StructXLIPTermOptions.top_k
        lexicons = options.filter_options() if isinstance(options, FilterOptions) else FilterOptions()
        boxes = [[] if e is None else [seg.box for seg in e.segments] for e in self.sidecar.per_image(self.ds)]
        items = EdgeItems(self.ds.images, self.encoder.image_transform, self.edges, boxes, top_k)
        self.filtered = [filter_caption(text, lexicons) for text in self.ds.captions]
        self.filtered_tokens = self.encoder.tokenize(self.filtered).tokens
        self.encode = bpe_encode(self.encoder)
        self.side_record["edge_maps"] = self.edges.settings.recorded()
        self.side_record["filtered_captions"] = {"lexicons": asdict(lexicons),
                                                 "changed": sum(a != b for a, b in zip(self.filtered,
                                                                                        self.ds.captions))}
        self.side_record["segments"] = {"path": str(self.sidecar_path), "writer": self.sidecar.writer,
                                        "parameters": self.sidecar.parameters, "top_k": top_k}
        return items

    def _segment_items(self) -> SegmentItems:
        """GOAL's side inputs: one segment per image and epoch (its crop, its sentence, box and span)."""
        c = self.config
        self.plan = SegmentPlan.build(self.sidecar, self.ds, bpe_encode(self.encoder),
                                      self.encoder.info.context_length, choice=c.segment_choice, seed=c.seed)
        items = SegmentItems(self.ds.images, self.encoder.image_transform, self.plan, c.crop_margin)
        sentences = sorted({s.sentence for segs in self.plan.segments for s in segs})
        self.sentence_row = {text: k for k, text in enumerate(sentences)}
        self.sentence_tokens = self.encoder.tokenize(sentences).tokens
        self.side_record["segments"] = {"path": str(self.sidecar_path), "writer": self.sidecar.writer,
                                        "parameters": self.sidecar.parameters, "choice": c.segment_choice,
                                        "crop_margin": c.crop_margin}
        return items

    def _build_optimizer(self) -> None:
        """AdamW over the trainable parameters (each extra module its own group), RNG, AMP and DDP."""
        c, dist, device = self.config, self.dist, self.dist.device
        named = [(n_, p) for n_, p in self.towers.model.named_parameters() if p.requires_grad]
        self.params = [p for _, p in named]
        opt_groups = param_groups(named, c.weight_decay)
        for m in self.objective.modules:  # each extra module: its own learning rate and weight decay
            assert m.module is not None  # built above
            extra = param_groups(list(m.module.named_parameters()),
                                 c.weight_decay if m.weight_decay is None else m.weight_decay)
            self.params += [p for g in extra for p in g["params"]]
            opt_groups += [{**g, "base_lr": c.lr if m.lr is None else m.lr} for g in extra]
        self.opt = torch.optim.AdamW(opt_groups, lr=c.lr)
        self.rng = np.random.default_rng(c.seed)
        self._setup_amp(device)
        self.ddp: torch.nn.Module = self.towers
        if dist.world_size > 1:
            # the objective's own modules run in the loss, outside the towers' forward: DDP leaves them alone
            # and their gradients are averaged over the ranks after the backward (_average_extra_grads)
            DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(  # type: ignore[no-untyped-call]
                self.towers, [n for n, _ in self.towers.named_parameters() if n.startswith("extra.")])
            self.ddp = DistributedDataParallel(
                self.towers, device_ids=[dist.local_rank] if device.startswith("cuda") else None)

    def _load_data(self) -> Any:
        c = self.config
        ds = load_dataset(c.dataset, data_root=c.data_root, protocol=c.protocol, **c.dataset_options)
        return subset_fraction(ds, c.data_fraction, c.seed)

    @property
    def sidecar_path(self) -> Path:
        return Path(self.config.segments) if self.config.segments else default_sidecar_path(self.ds)

    def _side_inputs(self, glob: list[int], caps: list[int], epoch: int,
                     batch: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """This rank's side inputs of global batch ``glob`` (captions ``caps``): (through the towers, for the terms)."""
        device, dist = self.dist.device, self.dist
        b = len(glob) // dist.world_size
        local = glob if dist.world_size == 1 else glob[dist.rank * b:(dist.rank + 1) * b]
        if self.filtered is not None:
            local_caps = caps if dist.world_size == 1 else caps[dist.rank * b:(dist.rank + 1) * b]
            extra = {"edge": batch[2].to(device), "edge_crops": batch[3].flatten(0, 1).to(device),
                     "filtered": self.filtered_tokens[local_caps].to(device)}
            return extra, {"crop_valid": batch[4].to(device), "filtered_captions": [self.filtered[j] for j in local_caps],
                           "filtered_tokens": extra["filtered"],
                           "encode": self.encode}
        if self.plan is None:
            return {}, {}
        segs = [self.plan.pick(int(i), epoch) for i in local]
        rows = [self.sentence_row[s.sentence] for s in segs]
        extra = {"crop": batch[2].to(device), "sentence": self.sentence_tokens[rows].to(device)}
        side = {"boxes": [s.box for s in segs], "image_sizes": [s.image_size for s in segs],
                "spans": [s.span for s in segs]}
        return extra, side

    def _setup_amp(self, device: str) -> None:
        c = self.config
        self.amp_dtype = None
        self.scaler = None
        self.amp_device = "cuda" if device.startswith("cuda") else "cpu"
        if c.amp and self.amp_device == "cpu" and c.amp_dtype != "bf16":
            # CPU autocast is bf16's: fp16 would need loss scaling that CPU training does not use
            logger.warning("amp: fp16 autocast is used on CUDA only; training in fp32 on %s (amp_dtype bf16 "
                           "autocasts on the CPU)", device)
        elif c.amp:
            self.amp_dtype = torch.bfloat16 if c.amp_dtype == "bf16" else torch.float16
            if self.amp_dtype == torch.float16:
                self.scaler = torch.amp.GradScaler("cuda")

    def _autocast(self) -> Any:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.amp_device, dtype=self.amp_dtype)

    def _backward(self, loss: torch.Tensor) -> None:
        scaled = self.scaler.scale(loss) if self.scaler is not None else loss
        scaled.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> Path:
        c, dist = self.config, self.dist
        self.log_path = self.out_dir / "log.jsonl"
        self.diag_path = self.out_dir / "diagnostics.jsonl"
        state = TrainState()
        if c.resume:
            state = load_state(resolve_resume(c.resume), self.towers, self.opt, self.scaler, self.rng,
                               self._config_dict())
            if dist.is_main:
                trim_jsonl(self.log_path, lambda r: r["step"] < state.step)
                trim_jsonl(self.diag_path, lambda r: r.get("step", 0) < state.step if r["kind"] == "step"
                           else r["epoch"] < state.epoch or (r["kind"] == "eval" and r["epoch"] <= state.epoch))
        elif dist.is_main:
            if c.overwrite:
                self._clear_outputs()
            claim(self.out_dir, self.log_path.name, self.diag_path.name)
            self.log_path.write_text("")
            self.diag_path.write_text("")
        start = time.perf_counter() - state.seconds
        if c.eval_dataset and c.eval_at_start and state.step == 0:
            self._evaluate(0, 0)
        stopped = False
        resumed_epoch = state.epoch if c.resume else None
        bar_total = min(self.total, c.stop_at_step or self.total)  # where this run stops (the schedule keeps total)
        with tqdm(total=bar_total, initial=state.step, desc=f"train ({'' if c.objective == 'clip' else c.objective + ', '}{c.loss})",
                  disable=not self.progress or not dist.is_main) as bar:
            for epoch in range(state.epoch, c.epochs):
                if epoch == resumed_epoch:  # continue exactly where the saved state stopped
                    assert state.epoch_generator_state is not None  # load_state restored it
                    self.generator.set_state(state.epoch_generator_state)
                    self.sampler.skip = state.batch_in_epoch
                else:
                    state.epoch_generator_state = self.generator.get_state()
                    state.epoch, state.batch_in_epoch = epoch, 0
                    state.epoch_records, state.epoch_losses = [], []
                stopped = self._epoch(state, bar, start)
                complete = state.batch_in_epoch >= self.micro_per_epoch
                if complete:
                    self._end_epoch(state, start)
                if stopped:
                    if not complete:
                        self._save(state, start)
                    break
        return self._finish(state, start, stopped)

    def _clear_outputs(self) -> None:
        """--overwrite: remove what the earlier run recorded writing (and nothing else), now that this one can start."""
        removed = clear_recorded(self.out_dir)
        if removed:
            logger.warning("--overwrite: removed the earlier run's %s in %s", ", ".join(removed), self.out_dir)

    def _epoch(self, state: Any, bar: Any, start: float) -> bool:
        c, dist = self.config, self.dist
        device = dist.device
        group: list[MicroBatch] = []
        stop = False
        if isinstance(self.items, SegmentItems):
            self.items.epoch = state.epoch  # before the pass: its workers start with it
        for batch in self.loader:
            pixels = batch[0]
            glob = self.sampler.issued.popleft()
            caps = [int(self.rng.choice(self.captions_of[int(i)])) for i in glob]
            if self.plan is not None:  # the long caption is the one the segment's spans index
                caps = [self.plan.pick(int(i), state.epoch).caption for i in glob]
            extra, side = self._side_inputs(glob, caps, state.epoch, batch)
            b = len(glob) // dist.world_size  # this rank's pairs (an epoch's last batch may be smaller)
            local = caps if dist.world_size == 1 else caps[dist.rank * b:(dist.rank + 1) * b]
            tokens = self.tokens[local].to(device)
            g_text = None
            if self.frozen is not None:
                with torch.no_grad():
                    g_text = self.frozen.encode_text(tokens)
            group.append(MicroBatch(pixels.to(device), tokens, [int(i) for i in glob],
                                    [self.ds.captions[j] for j in caps], g_text, extra, side))
            state.batch_in_epoch += 1
            if len(group) < c.accum_steps and state.batch_in_epoch < self.micro_per_epoch:
                continue
            step = state.step
            self.objective.progress = state.epoch + (state.batch_in_epoch - len(group)) / self.micro_per_epoch
            lr = cosine_lr(step, self.total, c.lr, c.warmup_steps)
            for g in self.opt.param_groups:  # the same warm-up and cosine for every group, from its own peak
                g["lr"] = lr if "base_lr" not in g else cosine_lr(step, self.total, g["base_lr"], c.warmup_steps)
            if c.diag_every and step % c.diag_every == 0 and dist.is_main:
                self._diagnose(group[0], state)
            scale = float(self.towers.scale().detach())
            self.opt.zero_grad(set_to_none=True)
            loss = run_step(self.ddp, self.towers, group, self.objective, mode=c.accum_mode,
                            autocast=self._autocast, backward=self._backward)
            self._average_extra_grads()
            loss = dist.mean(loss)  # rank losses are local shares: their mean is the global loss
            terms = {name: dist.mean(v) for name, v in self.objective.last_terms.items()}
            # every term exactly 0 (not merely weighted 0 by a warm-up schedule): before the optimizer moves
            # anything, its weight decay included
            if step == 0 and loss == 0.0 and all(v == 0.0 for v in terms.values()):
                raise ConfigError(self._silent_start())
            if self.scaler is not None:
                self.scaler.unscale_(self.opt)
            if c.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.params, c.grad_clip)
            if self.scaler is not None:
                self.scaler.step(self.opt)
                self.scaler.update()
            else:
                self.opt.step()
            self.towers.clamp_logit_scale()
            group = []
            state.epoch_losses.append(loss)
            if dist.is_main and (step % c.log_every == 0 or step == self.total - 1):
                rec = {"step": step, "epoch": state.epoch, "loss": loss, "lr": lr, "logit_scale": scale,
                       "terms": terms, "seconds": round(time.perf_counter() - start, 3)}
                append_line(self.log_path, json.dumps(rec))
                bar.set_postfix(loss=f"{loss:.4f}")
            state.step += 1
            bar.update(1)
            mid_epoch = state.batch_in_epoch < self.micro_per_epoch
            if c.stop_at_step is not None and state.step >= c.stop_at_step:
                stop = True
                if mid_epoch:
                    return True
                # at an epoch end, let the loop finish: the sampler draws from the generator lazily
            if c.save_every and state.step % c.save_every == 0 and mid_epoch:
                self._save(state, start)
        return stop

    def _silent_start(self) -> str:
        """The line for a run whose first step's loss is exactly 0, every term of it (a contrastive term: every
        positive of the batch at probability exactly 1 in fp32): no gradient at all, nothing to learn from the
        start, so the run stops untrained. A term its schedule weights 0 at first (FineLIP's ramp) is not 0."""
        c = self.config
        why = (f"; with --gamma {c.gamma:g} the handicap γ·s·Ḡ of every negative whose caption is dissimilar "
               "(Ḡ < 0) pushes it out of the softmax: a smaller --gamma (the paper's: 0.5)"
               if LOSSES.entry(c.loss).uses_g and c.gamma > 0 else "")
        return ("the training loss is exactly 0.0 at the first step, every term of it: no gradient reaches the "
                "model (a contrastive loss is 0 only when each positive of the batch has probability exactly 1 in "
                f"fp32){why}; stopped before the first update, no checkpoint written")

    def _average_extra_grads(self) -> None:
        """The mean over ranks of the objective modules' gradients (what DDP does for the towers' own)."""
        if self.dist.world_size == 1:
            return
        for p in self.towers.extra.parameters():
            if p.grad is not None:
                torch.distributed.all_reduce(p.grad)  # the default group: tensor collectives (as DDP)
                p.grad /= self.dist.world_size

    def _diagnose(self, mb: Any, state: Any) -> None:
        rec = measure(self.towers, mb.pixels, mb.tokens, gamma=self.config.gamma,
                      mask=self.objective.mask(mb.image_ids[:len(mb.tokens)], mb.caption_texts[:len(mb.tokens)]),
                      active_threshold=self.config.active_threshold, amp_dtype=self.amp_dtype)
        rec = {"kind": "step", "step": state.step, "epoch": state.epoch, **rec}
        state.epoch_records.append(rec)
        self._write_diag(rec)

    def _write_diag(self, rec: dict[str, Any]) -> None:
        append_line(self.diag_path, json.dumps(rec))

    def _end_epoch(self, state: Any, start: float) -> None:
        c = self.config
        if self.dist.is_main and c.diag_every:
            self._write_diag(summarize_epoch(state.epoch, state.epoch_records, state.epoch_losses,
                                             c.active_threshold))
        if c.eval_dataset and (state.epoch + 1) % c.eval_every == 0:
            self._evaluate(state.epoch + 1, state.step)
        state.epoch += 1
        state.batch_in_epoch = 0
        state.epoch_records, state.epoch_losses = [], []
        state.epoch_generator_state = self.generator.get_state()
        self._save(state, start)  # after the last epoch too: the run's last resumable state is its end

    def _evaluate(self, epoch: int, step: int) -> None:
        """Score the current weights with the run's periodic evaluation (rank 0; the others wait): the encoder
        named after this run and epoch, the torch RNG forked (the training's stream is untouched)."""
        if self.dist.is_main:
            assert self.periodic is not None  # train() refuses an eval_dataset without one
            claim(self.out_dir, "eval")
            self.towers.eval()
            self.encoder.info.fingerprint = state_dict_fingerprint(self.towers.model.state_dict())
            info = self.encoder.info
            # the result names the weights it scored (this run after this epoch, e.g. "tiny-hn/epoch-001" as
            # its label), not the start weights, which it records as trained_from
            self.encoder.info = replace(info, pretrained=str(self.out_dir / f"epoch-{epoch:03d}"),
                                        extra={**info.extra, "trained_from": info.pretrained, "epoch": epoch})
            try:
                with torch.random.fork_rng(devices=[]):
                    scores = self.periodic(self.encoder, device=self.dist.device, epoch=epoch,
                                           output_dir=self.out_dir / "eval" / f"epoch-{epoch:03d}")
            finally:
                self.encoder.info = info
            self.towers.train()
            self._write_diag({"kind": "eval", "epoch": epoch, "step": step, **scores})
        self.dist.barrier()

    def _config_dict(self) -> dict[str, Any]:
        return asdict(self.config)

    def _save(self, state: Any, start: float) -> None:
        state.seconds = time.perf_counter() - start
        if self.dist.is_main:
            claim(self.out_dir, STATE_DIR)
            save_state(self.out_dir, self.towers, self.opt, self.scaler, state, self.rng, self._config_dict())
        self.dist.barrier()

    def _finish(self, state: Any, start: float, stopped: bool) -> Path:
        c = self.config
        path = self.out_dir / "checkpoint.safetensors"
        if self.dist.is_main:
            try:
                outputs = export_checkpoints(self.towers.model, self.encoder, c, self.out_dir, family=self.family,
                                             extra=self.towers.extra)
            except WRITE_ERRORS as e:
                raise write_failed(f"the checkpoint in {self.out_dir}", e, shutil.disk_usage(self.out_dir).free,
                                   f"the run's final state is kept in {self.out_dir / STATE_DIR}") from e
            claim(self.out_dir, "train_config.json", *(Path(v).relative_to(self.out_dir).parts[0]
                                                       for v in outputs.values()))
            path = Path(outputs["checkpoint"])
            meta = {"config": self._config_dict(), "steps": state.step,
                    "seconds": round(time.perf_counter() - start, 2),
                    "dataset_fingerprint": self.ds.fingerprint(), "checkpoint": path.name,
                    "outputs": {k: str(Path(v).relative_to(self.out_dir)) for k, v in outputs.items()},
                    "world_size": self.dist.world_size, "stopped_early": stopped and state.step < self.total,
                    "total_steps": self.total, "epoch_batches": self.sampler.record(),
                    "n_train_images": self.ds.n_images, "side_inputs": self.side_record}
            atomic_write_bytes(self.out_dir / "train_config.json", (json.dumps(meta, indent=2) + "\n").encode())
            logger.info("wrote %s after %d steps", path, state.step)
            if summary := r1_summary(self.out_dir):
                logger.info("%s", summary)
        self.dist.barrier()
        return path
