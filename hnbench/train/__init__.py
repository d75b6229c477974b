"""The training side (importable without the evaluation stack's heavy paths).

losses       InfoNCE / HN-CLIP (fp32, masks, label smoothing, Ḡ source)
token_loss   the FILIP-style token-level term
distributed  DistributedHNCLIPLoss: the HN loss as a module for your own DDP loop (hnbench.distributed: the context)
config       TrainConfig and recipes (re-exported by trainer)
trainer      train(); step (accumulation modes), batches, state (resume), export
diagnostics  InfoNCE-vs-HN gradient measurements; report: ``hnbench train-report``
adapters     LoRA / DoRA through peft; towers: one module over any family's CLIP module (its adapter asked)
"""
