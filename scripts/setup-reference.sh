#!/usr/bin/env bash
# Makes .venv-ref: a virtualenv with the Python packages flowline is compared against (torch with its
# NVIDIA wheels, transformers, sentence-transformers, tokenizers, sentencepiece), for the scripts that
# write the committed reference data (scripts/make_tiny_models.py, scripts/make_goldens.py) and for the
# parity scripts. Not part of set-up or CI: about 4 GB. Safe to re-run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ -x .venv-ref/bin/python ] || python3 -m venv .venv-ref
.venv-ref/bin/pip install -q --disable-pip-version-check torch==2.11.0 "transformers==5.24.*" \
  "sentence-transformers==6.2.*" "tokenizers==0.23.*" sentencepiece protobuf safetensors numpy
.venv-ref/bin/python -c "import torch, transformers, sentence_transformers as st; print('torch', torch.__version__, 'transformers', transformers.__version__, 'sentence-transformers', st.__version__)"
