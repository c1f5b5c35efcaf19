#!/usr/bin/env bash
# Everything that needs a GPU, in one run under 8 minutes on one GPU (run it whenever one is lent):
#   1. trainer throughput, achieved TFLOP/s and MFU (bikes network, 64 px, batch 128), torch.compile off and on;
#   2. the full doctor on a bikes-like spec, including its bf16 mixed-precision check; 2b. the shipped bikes
#      spec's preflight (`hpo doctor --fast`) on generated photos, timed (its overfit line names the lr that passed);
#   2c. hpo train with the EMA length swept (post-hoc EMA): its hardware line (CUDA memory, NVML, data wait);
#   3. a real CUDA out-of-memory in a worker: the trial is recorded as `oom` and the worker carries on (status
#      shows each trial's hardware column);
#   4. a 4-trial study with Inception FID when the weights are present ($HPO_FID_WEIGHTS or ~/.cache/hpo);
#   6. trials per hour with K = 1, 2, 4 worker processes on one GPU (hpo worker --per-gpu K), for the quickstart-sized
#      and the bikes-sized network (unpruned trials of one configuration, 2K per K, so every K does the same work).
# Usage: bash benchmarks/gpu_check.sh   (from the repository root, in the project's environment)
set -euo pipefail
PY=${PYTHON:-python}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: no CUDA device')"

echo "== 1. throughput (bikes network, bf16) =="
timeout 180 "$PY" -m benchmarks.gpu_throughput

echo "== 2. the full doctor, with its bf16 check =="
cat > "$WORK/bikes-shapes.yaml" <<YAML
study: {name: gpu-doctor, n_trials: 4}
data: {source: shapes, image_size: 64, num_images: 2000, cache_dir: $WORK/cache}
train: {kimg: 20, num_evals: 4, base_channels: 128, channel_mult: [1, 2, 2, 2], num_res_blocks: 2, attention_resolutions: [16], hflip: true, warmup_kimg: 2}
sampling: {guidance_scale: [1.0, 2.0], steps: [25, 50]}
score: {features: classifier, num_samples: 1000, batch_size: 250}
search:
  lr: {type: float, low: 5.0e-5, high: 1.0e-3, log: true}
  batch_size: {type: categorical, choices: [32, 64, 128]}
baselines: [{lr: 4.0e-4, batch_size: 32}]
YAML
timeout 120 "$PY" -m hpo doctor "$WORK/bikes-shapes.yaml" -o "$WORK/doctor" || true

echo "== 2b. the shipped bikes spec's preflight (hpo doctor --fast, what hpo launch runs), timed =="
"$PY" - "$WORK/bikes/data/bikes" <<'PY'
import sys
from pathlib import Path
from PIL import Image
from hpo.training.shapes import render_shapes
images, labels, names = render_shapes(200, 64, seed=3)
for i, (image, label) in enumerate(zip(images, labels)):
    folder = Path(sys.argv[1]) / names[int(label)]
    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image.transpose(1, 2, 0)).save(folder / f"{i}.png")
PY
REPO=$(pwd)
(cd "$WORK/bikes" && time timeout 240 "$PY" -m hpo doctor "$REPO/search_spaces/bikes.yaml" --fast -o "$WORK/doctor-bikes") || true

echo "== 2c. hpo train with the EMA length swept: hardware telemetry (CUDA memory, NVML, data wait) and the EMA column =="
sed -e 's/name: gpu-doctor/name: gpu-train/' \
    -e 's/sampling: {guidance_scale: \[1.0, 2.0\], steps: \[25, 50\]}/sampling: {guidance_scale: [1.0, 2.0], steps: 25, ema_sigma_rel: [0.05, 0.1, 0.2], screen_samples: 250, rescore_top: 1}/' \
    "$WORK/bikes-shapes.yaml" > "$WORK/train-ema.yaml"
timeout 150 "$PY" -m hpo train "$WORK/train-ema.yaml" --set kimg=6 --set score.num_samples=500 -o "$WORK/train-ema" \
  | grep -E "EMA|hardware|<- best|stop verdict" || true

echo "== 3. a real CUDA out-of-memory, recorded as oom; the worker carries on =="
cat > "$WORK/oom.yaml" <<YAML
study: {name: gpu-oom, n_trials: 2}
data: {source: shapes, image_size: 64, num_images: 2000, cache_dir: $WORK/cache}
train: {kimg: 66, num_evals: 1, base_channels: 128, channel_mult: [1, 2, 2, 2], num_res_blocks: 2, attention_resolutions: [16]}
sampling: {guidance_scale: 1.0, steps: 25}
score: {features: classifier, num_samples: 250, batch_size: 250}
search:
  batch_size: {type: categorical, choices: [32, 65536]}
baselines: [{batch_size: 65536}, {batch_size: 32}]
YAML
timeout 200 "$PY" -m hpo launch "$WORK/oom.yaml" --storage "sqlite:///$WORK/oom.db" --skip-doctor \
  --artifacts "$WORK/art" || true
"$PY" -m hpo status gpu-oom --storage "sqlite:///$WORK/oom.db" --wide

echo "== 4. a 4-trial study with Inception FID =="
if "$PY" -c "from hpo.scoring.weights import verify_weights, weights_path; verify_weights(weights_path())" 2>/dev/null; then
  sed -e 's/name: gpu-doctor/name: gpu-inception/' -e 's/features: classifier/features: inception/' \
      -e 's/kimg: 20/kimg: 8/' "$WORK/bikes-shapes.yaml" > "$WORK/inception.yaml"
  timeout 240 "$PY" -m hpo launch "$WORK/inception.yaml" --storage "sqlite:///$WORK/inception.db" --skip-doctor \
    --artifacts "$WORK/art" || true
else
  echo "no Inception weights here: run \`hpo fetch-weights\` first; skipped"
fi

echo "== 5. the built image's worker on the GPU (docker run --gpus all), when Docker and the NVIDIA runtime are here =="
if command -v docker >/dev/null && docker info 2>/dev/null | grep -qi nvidia && docker image inspect hpo:latest >/dev/null 2>&1; then
  sed -e 's/name: gpu-doctor/name: gpu-container/' -e 's/kimg: 20/kimg: 4/' -e 's/n_trials: 4/n_trials: 1/' \
      -e "s|cache_dir: $WORK/cache|cache_dir: /work/cache|" "$WORK/bikes-shapes.yaml" > "$WORK/container.yaml"
  chmod -R a+rwX "$WORK"
  "$PY" -m hpo launch "$WORK/container.yaml" --storage "sqlite:///$WORK/container.db" --workers 0 --detach --skip-doctor
  timeout 300 docker run --rm --gpus all -v "$WORK:/work" -e HPO_STORAGE=sqlite:////work/container.db hpo:latest \
    worker --gpus all --exit-when-idle --artifacts /work/art --cache-dir /work/cache || true
  "$PY" -m hpo status gpu-container --storage "sqlite:///$WORK/container.db" --wide  # "ran on" names the GPU
else
  echo "no Docker with the NVIDIA runtime, or no hpo:latest image (docker build -t hpo:latest .): skipped"
fi

echo "== 6. trials per hour with K worker processes on one GPU (--per-gpu K) =="
for size in quick bikes; do
  if [ "$size" = quick ]; then
    net="data: {source: digits, image_size: 16, cache_dir: $WORK/cache}
train: {kimg: 12, num_evals: 4, base_channels: 32, channel_mult: [1, 2], num_res_blocks: 1, batch_size: 32}
score: {features: classifier, num_samples: 256, batch_size: 64}"
  else
    net="data: {source: shapes, image_size: 64, num_images: 2000, cache_dir: $WORK/cache}
train: {kimg: 8, num_evals: 4, base_channels: 128, channel_mult: [1, 2, 2, 2], num_res_blocks: 2, attention_resolutions: [16], batch_size: 64}
score: {features: classifier, num_samples: 500, batch_size: 250}"
  fi
  for k in 1 2 4; do
    cat > "$WORK/per-gpu-$size-$k.yaml" <<YAML
study: {name: per-gpu-$size-$k, n_trials: $((2 * k))}
$net
sampling: {guidance_scale: 2.0, steps: 20}
pruner: {name: none}
search:
  lr: {type: float, low: 3.9e-4, high: 4.1e-4}
YAML
    db="sqlite:///$WORK/per-gpu.db"
    "$PY" -m hpo launch "$WORK/per-gpu-$size-$k.yaml" --storage "$db" --workers 0 --detach --skip-doctor >/dev/null
    start=$(date +%s.%N)
    timeout 240 "$PY" -m hpo worker --study "per-gpu-$size-$k" --storage "$db" --gpus 0 --per-gpu "$k" \
      --exit-when-idle --poll 1 --artifacts "$WORK/art" --reports "$WORK/reports" 2>"$WORK/per-gpu-$size-$k.log" || true
    "$PY" - "$db" "per-gpu-$size-$k" "$start" "$k" "$size" <<'PY'
import sys, time
import optuna
from hpo.service.trials import fail_reason
db, name, start, k, size = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
trials = optuna.load_study(study_name=name, storage=db).get_trials()
done = [t for t in trials if t.state.name == "COMPLETE"]
oom = [t for t in trials if fail_reason(t) == "oom"]
hours = (time.time() - start) / 3600
print(f"{size:5s} K={k}: {len(done)}/{len(trials)} trials complete in {hours * 3600:.0f} s = "
      f"{len(done) / hours:.1f} trials/h per GPU; {len(oom)} out of memory")
PY
  done
done
