# hnbench on an NVIDIA GPU: CUDA torch and GPU FAISS (faiss-gpu-cu12 in place of faiss-cpu).
#
#   docker build -t hnbench:0.1.0 .
#   docker run --rm --gpus all --shm-size 2g -v hnbench-cache:/cache -v "$PWD/results:/workspace/results" \
#       hnbench:0.1.0 demo --device cuda --amp --output results/demo
#   docker run --rm --gpus all --shm-size 2g --entrypoint /opt/hnbench/benchmarks/gpu_smoke.sh hnbench:0.1.0   # self-check
#
# Host: an NVIDIA driver >= 580 (torch's wheels carry CUDA 13.0 libraries; faiss-gpu-cu12 carries
# CUDA 12's, which the same driver runs) and the NVIDIA Container Toolkit. For an older driver, build a
# CUDA 12.8 torch:  --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 \
#                   --build-arg CUDA_IMAGE=nvidia/cuda:12.8.1-base-ubuntu24.04
#
# Both stages use the same base, so the venv built in the first runs unchanged in the second (same
# /usr/bin/python3.12). The "base" flavour (CUDA runtime only, no cuBLAS/cuDNN) keeps the image slim:
# the torch and faiss wheels bring every CUDA library they load. Pin the digest too where builds must
# be reproducible bit for bit (FROM nvidia/cuda:TAG@sha256:...).
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-base-ubuntu24.04

# ---------------------------------------------------------------------------------------- builder
FROM ${CUDA_IMAGE} AS builder

ARG FAISS_GPU_VERSION=1.14.1.post1
ARG PYTEST_VERSION=9.2.0
ARG PYTEST_TIMEOUT_VERSION=2.4.0
ARG TORCH_INDEX_URL=""
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# apt versions are not pinned (DL3008): the base tag fixes the Ubuntu release, and a pinned version of
# its python3 breaks the build as soon as a security update replaces it in the archive.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./

# hnbench's dependencies without faiss-cpu: faiss-gpu-cu12 provides the same `faiss` module, and the two
# installed together overwrite each other's files. constraints.txt pins the tested versions (torch and
# torchvision as a pair; PyPI's torch 2.14.1 is the CUDA 13.0 build); faiss-cpu's pin is dropped with it.
# The pytest pair lets the image run its own GPU tests (benchmarks/gpu_smoke.sh).
RUN python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print('\n'.join(d for d in deps if not d.startswith('faiss-cpu')))" > /tmp/requirements.txt \
    && grep -v '^faiss-cpu' constraints.txt > /tmp/constraints.txt \
    && if [ -n "$TORCH_INDEX_URL" ]; then \
         pip install --no-cache-dir -c /tmp/constraints.txt --index-url "$TORCH_INDEX_URL" torch torchvision; \
       fi \
    && pip install --no-cache-dir -c /tmp/constraints.txt -r /tmp/requirements.txt \
         "faiss-gpu-cu12==${FAISS_GPU_VERSION}" "pytest==${PYTEST_VERSION}" "pytest-timeout==${PYTEST_TIMEOUT_VERSION}"

COPY hnbench ./hnbench
# --no-deps: the dependencies are in place, and pip would otherwise bring faiss-cpu back. The uninstall
# is a guard against anything that still pulled it in; the import then proves the `faiss` module left
# is the GPU build (no GPU is needed to see that it has GPU classes).
RUN pip install --no-cache-dir --no-deps . \
    && pip uninstall -y faiss-cpu \
    && python -c "import faiss, hnbench, torch; assert hasattr(faiss, 'StandardGpuResources'), 'faiss is not the GPU build'; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'faiss', faiss.__version__)"

# ---------------------------------------------------------------------------------------- runtime
FROM ${CUDA_IMAGE} AS runtime

LABEL org.opencontainers.image.title="hnbench" \
      org.opencontainers.image.description="CLIP retrieval on long dense captions: CUDA torch + GPU FAISS" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV DEBIAN_FRONTEND=noninteractive

# Only the interpreter (no pip, no compilers). /cache and /workspace are world-writable with the sticky
# bit so that `docker run --user "$(id -u):$(id -g)"` (results owned by you on the host) works too.
# Unpinned apt versions: as in the builder.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 --user-group --shell /usr/sbin/nologin hnbench \
    && mkdir -p /cache/huggingface /cache/hnbench /workspace \
    && chown -R hnbench:hnbench /cache /workspace \
    && chmod 1777 /cache /cache/huggingface /cache/hnbench /workspace

COPY --from=builder /opt/venv /opt/venv
# The GPU smoke script and the tests it runs (`pytest -m gpu`), with the pytest settings in pyproject.toml.
COPY pyproject.toml /opt/hnbench/
COPY benchmarks /opt/hnbench/benchmarks
COPY tests /opt/hnbench/tests

# HF_HOME: Hugging Face downloads (open_clip / transformers weights, datasets); HNBENCH_CACHE: synthdense
# and the embedding cache. Both live on the /cache volume, so they outlast the container.
ENV PATH=/opt/venv/bin:$PATH \
    HF_HOME=/cache/huggingface \
    HNBENCH_CACHE=/cache/hnbench \
    XDG_CACHE_HOME=/cache \
    MPLCONFIGDIR=/tmp/matplotlib \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
VOLUME ["/cache"]

WORKDIR /workspace
# numeric, so that `runAsNonRoot` checks (Kubernetes) can see it is not root
USER 10001:10001
ENTRYPOINT ["hnbench"]
CMD ["--help"]
