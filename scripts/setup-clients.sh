#!/usr/bin/env bash
# Sets up .venv-clients: the Python clients the gateway's compatibility tests and bench/serve_http.py use,
# i.e. Jina 3.34.0 (its HTTP Client and, for the side-by-side bench, a real Flow) with docarray v2, the
# openai package and cohere's (its rerank clients); and kubernetes-validate, which checks what `flowline export kubernetes` writes
# (tests/deploy). Safe to re-run: when the venv exists and holds exactly the pinned set it says so and stops.
#
#   scripts/setup-clients.sh            create or complete .venv-clients
#   scripts/setup-clients.sh --force    delete .venv-clients and install it again
#
# Environment: FLOWLINE_CLIENTS_VENV (default <repo>/.venv-clients), PYTHON (default python3, needs >= 3.9;
# the pins were resolved and tested with CPython 3.11 on Debian 12).
#
# Why every version is pinned: `pip install jina==3.34.0` alone backtracks for minutes through the
# opentelemetry packages and ends in ResolutionImpossible once pydantic/fastapi are pinned (they must be:
# with the newest pair an HTTP Flow cannot start). Jina 3.34.0 also needs protobuf 4.x (its jina_pb2 picks
# generated code by protobuf's major version; 5.x loads the 3.x code and fails), hence grpcio 1.62.x (1.63+
# wants protobuf 5) and opentelemetry 1.25.0 / 0.46b0 (the newest that accept protobuf 4), and numpy < 2
# for docarray 0.40. The list below is the complete `pip freeze` of a working install, so pip resolves
# nothing and the set is the same on every run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FLOWLINE_CLIENTS_VENV:-$ROOT/.venv-clients}"
PYTHON="${PYTHON:-python3}"

PINS="
jina==3.34.0
docarray==0.40.0
openai==3.54.0
kubernetes-validate==1.37.0
cohere==7.3.1
fastavro==1.13.1
fsspec==2026.9.0
hf-xet==1.8.0
httpcore==1.0.9
httpx==0.28.1
huggingface_hub==2.4.0
tokenizers==0.23.3
tqdm==4.70.1
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
referencing==0.37.0
rpds-py==2026.9.1
importlib_resources==7.1.0
pydantic==2.10.6
pydantic_core==2.27.2
fastapi==0.115.12
starlette==0.46.2
uvicorn==0.23.1
protobuf==4.25.8
grpcio==1.62.3
grpcio-health-checking==1.62.3
grpcio-reflection==1.62.3
numpy==1.26.4
opentelemetry-api==1.25.0
opentelemetry-sdk==1.25.0
opentelemetry-proto==1.25.0
opentelemetry-exporter-otlp==1.25.0
opentelemetry-exporter-otlp-proto-common==1.25.0
opentelemetry-exporter-otlp-proto-grpc==1.25.0
opentelemetry-exporter-otlp-proto-http==1.25.0
opentelemetry-exporter-prometheus==0.46b0
opentelemetry-instrumentation==0.46b0
opentelemetry-instrumentation-aiohttp-client==0.46b0
opentelemetry-instrumentation-asgi==0.46b0
opentelemetry-instrumentation-fastapi==0.46b0
opentelemetry-instrumentation-grpc==0.46b0
opentelemetry-semantic-conventions==0.46b0
opentelemetry-util-http==0.46b0
aiofiles==25.1.0
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-types==0.8.0
anyio==4.16.0
asgiref==3.13.0
attrs==26.1.0
certifi==2026.10.18
charset-normalizer==3.5.2
click==8.5.1
Deprecated==1.3.1
docker==7.2.0
ecdsa==0.19.2
filelock==4.2.12
frozenlist==1.8.0
googleapis-common-protos==1.75.0
h11==0.16.0
httpcore2==2.16.2
httpx2==2.16.2
idna==3.20
importlib_metadata==7.1.0
jcloud==0.3
jina-hubble-sdk==0.39.0
jiter==0.19.0
markdown-it-py==4.3.0
mdurl==0.1.2
multidict==7.2.1
mypy_extensions==1.2.0
orjson==3.13.0
packaging==26.3
pathspec==1.1.1
prometheus_client==0.26.0
propcache==0.5.4
pyasn1==0.6.5
Pygments==2.21.0
python-dateutil==4.0.0
python-dotenv==1.2.4
python-jose==3.5.0
python-multipart==0.0.34
PyYAML==6.0.3
requests==2.34.2
rich==15.0.0
rsa==4.9.1
six==1.17.0
sniffio==1.3.1
truststore==0.10.5
types-requests==2.31.0.6
types-urllib3==1.26.25.14
typing-inspect==0.9.0
typing_extensions==4.16.0
tzdata==2026.6
urllib3==1.26.20
uvloop==0.23.0
websockets==17.4
wrapt==1.17.3
yarl==1.25.1
zipp==4.1.2
"
# What a working install must be able to do (imports only; nothing here starts a server).
SMOKE='import jina, docarray, openai
from jina import Client, Flow, Executor, requests
from docarray import DocList
from docarray.documents import TextDoc
assert jina.__version__ == "3.34.0", jina.__version__
import google.protobuf; assert google.protobuf.__version__.startswith("4."), google.protobuf.__version__
import kubernetes_validate
import cohere; assert cohere.__version__ == "7.3.1", cohere.__version__'

NAME=setup-clients
SUMMARY="jina 3.34.0 (HTTP Client, Flow), docarray 0.40.0, openai 3.54.0, cohere 7.3.1, kubernetes-validate 1.37.0"
PY_RANGE="(3, 9) <= sys.version_info"
PY_NEED="Jina 3.34.0 needs Python >= 3.9"
# shellcheck source=scripts/lib/pinned-venv.sh
source "$ROOT/scripts/lib/pinned-venv.sh"
pinned_venv "$@"
