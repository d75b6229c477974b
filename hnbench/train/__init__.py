"""The training side (importable without the evaluation stack's heavy paths).

losses       InfoNCE / HN-CLIP (fp32, masks, label smoothing, Ḡ source)
token_loss   the FILIP-style token-level term
distributed  local loss over features gathered with gradient (DDP / torchrun)
trainer      TrainConfig, recipes, train(); step (accumulation modes), batches, state (resume), export
diagnostics  InfoNCE-vs-HN gradient measurements; report: ``hnbench train-report``
adapters     LoRA / DoRA through peft; towers: one module over open_clip and HF CLIP
"""
