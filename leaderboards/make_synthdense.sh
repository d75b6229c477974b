#!/usr/bin/env bash
# Regenerates leaderboards/synthdense.md: hnbench's own models scored on synthdense/test.
#
#   leaderboards/make_synthdense.sh        # uses `hnbench` on PATH; HNBENCH=.venv/bin/hnbench to override
#
# Scores (1) the bundled model hnbench-tiny/synthdense (hnbench/assets/hnbench-tiny-synthdense.safetensors)
# and (2) every checkpoint a recipe wrote to runs/NAME/ (hnbench train --recipe ... --output runs/NAME),
# into leaderboards/results/synthdense/ (kept beside the board so its links resolve), then renders the
# board with deltas against the bundled model. Re-running replaces results of the same model, data and settings.
set -euo pipefail
cd "$(dirname "$0")/.."
HNBENCH=${HNBENCH:-hnbench}
DEVICE=${DEVICE:-cpu}
RESULTS=leaderboards/results/synthdense

"$HNBENCH" -q eval --model hnbench-tiny --pretrained synthdense --dataset synthdense --protocol test \
    --device "$DEVICE" --output "$RESULTS"
for cfg in runs/*/train_config.json; do
    [ -e "$cfg" ] || continue
    run=$(dirname "$cfg")
    arch=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["model"])' "$cfg")
    model_config=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"].get("model_config") or "")' "$cfg")
    "$HNBENCH" -q eval --model "$arch" ${model_config:+--model-config "$model_config"} \
        --pretrained "$run/checkpoint.safetensors" --dataset synthdense --protocol test \
        --device "$DEVICE" --output "$RESULTS"
done
# leaderboards/results/synthdense-study/: the 50 fine-tunes of benchmarks/hn_study.py (issue 16), copied from its
# OUT/results/*/ (regenerate with: python benchmarks/hn_study.py --output runs/hn-study)
"$HNBENCH" leaderboard "$RESULTS" leaderboards/results/synthdense-study --benchmark synthdense --protocol test --baseline 'hnbench-tiny (synthdense)' \
    --title 'synthdense: hnbench models' --output leaderboards/synthdense.md
