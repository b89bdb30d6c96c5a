#!/usr/bin/env bash
# Sets up .venv-clip: CLIP-as-service's own Python client, PyPI clip-client 0.8.3, unmodified, for
# tests/gateway/test_clip_client.cpp (docs/images.md, "CLIP-as-service's client"). It needs its own venv:
# clip-client wants docarray < 0.30 (the old DocumentArray), .venv-clients has docarray 0.40 for Jina's
# DocList client. Safe to re-run: when the venv exists and holds exactly the pinned set it says so and stops.
#
#   scripts/setup-clip-client.sh            create or complete .venv-clip
#   scripts/setup-clip-client.sh --force    delete .venv-clip and install it again
#
# Environment: FLOWLINE_CLIP_CLIENT_VENV (default <repo>/.venv-clip), PYTHON (default python3; the pins were
# resolved and tested with CPython 3.11 on Debian 12).
#
# Why these versions:
# - jina 3.27.0: the last Jina whose HTTP client puts the answer's documents in `response.data.docs`, which
#   clip-client's callbacks read. From 3.27.1 (3.34.0 included) they go to `response.direct_docs` and
#   `data.docs` is empty, so `Client.encode` over http fails with "Empty embedding returned from the server"
#   against any server. Jina 3.27.0 wants grpcio <= 1.57.0, opentelemetry-sdk < 1.20 and pydantic < 2.
# - docarray 0.21.1 (the last 0.2x) with pydantic 1.10: docarray 0.21's Document model declares its fields
#   Optional without defaults, which pydantic 2 takes as required (every document of an answer then fails).
# - protobuf 4.25.8 (Jina picks its generated code by protobuf's major version), numpy < 2 for docarray 0.21.
# The list is the complete `pip freeze` of a working install, so pip resolves nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FLOWLINE_CLIP_CLIENT_VENV:-$ROOT/.venv-clip}"
PYTHON="${PYTHON:-python3}"

PINS="
clip-client==0.8.3
jina==3.27.0
docarray==0.21.1
pydantic==1.10.27
aiofiles==25.1.0
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
anyio==4.16.0
asgiref==3.13.0
attrs==26.1.0
backoff==2.2.1
certifi==2026.10.19.post1
charset-normalizer==3.5.3
click==8.5.1
contourpy==1.3.3
cycler==0.12.1
Deprecated==1.3.1
docker==7.2.0
ecdsa==0.19.2
fastapi==0.125.0
filelock==4.3.1
fonttools==4.68.0
frozenlist==1.8.0
googleapis-common-protos==1.75.0
grpcio==1.57.0
grpcio-health-checking==1.57.0
grpcio-reflection==1.57.0
h11==0.16.0
httptools==0.9.0
idna==3.20
importlib-metadata==6.11.0
jcloud==0.3
jina-hubble-sdk==0.39.0
kiwisolver==1.5.1
lz4==4.4.5
markdown-it-py==4.3.0
matplotlib==3.11.2
mdurl==0.1.2
multidict==7.2.1
numpy==1.26.4
opentelemetry-api==1.19.0
opentelemetry-exporter-otlp==1.19.0
opentelemetry-exporter-otlp-proto-common==1.19.0
opentelemetry-exporter-otlp-proto-grpc==1.19.0
opentelemetry-exporter-otlp-proto-http==1.19.0
opentelemetry-exporter-prometheus==0.41b0
opentelemetry-instrumentation==0.40b0
opentelemetry-instrumentation-aiohttp-client==0.40b0
opentelemetry-instrumentation-asgi==0.40b0
opentelemetry-instrumentation-fastapi==0.40b0
opentelemetry-instrumentation-grpc==0.40b0
opentelemetry-proto==1.19.0
opentelemetry-sdk==1.19.0
opentelemetry-semantic-conventions==0.40b0
opentelemetry-util-http==0.40b0
packaging==26.4
pathspec==1.1.1
pillow==13.0.0
prometheus_client==0.26.0
propcache==0.5.4
protobuf==4.25.8
pyasn1==0.6.5
Pygments==2.21.0
pyparsing==3.3.3
python-dateutil==4.0.0
python-dotenv==1.2.4
python-jose==3.5.0
python-multipart==0.0.34
PyYAML==6.0.4
requests==2.34.2
rich==15.0.0
rsa==4.9.1
six==1.17.0
starlette==0.50.0
typing_extensions==4.16.0
tzdata==2026.6
urllib3==1.26.20
uvicorn==0.23.1
uvloop==0.23.0
watchfiles==1.3.0
websockets==17.4
wrapt==1.17.3
yarl==1.25.1
zipp==4.1.2
"
# What a working install must be able to do (imports and versions only; nothing here starts a server).
SMOKE='import clip_client, jina, docarray, pydantic
from clip_client import Client
from docarray import Document, DocumentArray
assert clip_client.__version__ == "0.8.3", clip_client.__version__
assert jina.__version__ == "3.27.0", jina.__version__
assert docarray.__version__ == "0.21.1", docarray.__version__
assert pydantic.VERSION.startswith("1."), pydantic.VERSION
import google.protobuf; assert google.protobuf.__version__.startswith("4."), google.protobuf.__version__'

NAME=setup-clip-client
SUMMARY="clip-client 0.8.3 (clip_client.Client), jina 3.27.0, docarray 0.21.1"
PY_RANGE="(3, 8) <= sys.version_info < (3, 13)"
PY_NEED="the pinned wheels (grpcio 1.57, numpy 1.26) need Python 3.8 to 3.12"
# shellcheck source=scripts/lib/pinned-venv.sh
source "$ROOT/scripts/lib/pinned-venv.sh"
pinned_venv "$@"
