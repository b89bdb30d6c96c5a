#!/usr/bin/env python3
"""CLIP-as-service's own Python client (PyPI clip-client 0.8.3, unmodified) against `flowline serve
flows/clip.yml`.

    .venv-clip/bin/python tests/gateway/clients/clip_client_test.py --url http://127.0.0.1:PORT \
        --expect-dim 24 --image A.jpg --image B.png [--image ...] [--timeout 120] \
        [--client-url grpc://127.0.0.1:GRPC_PORT]

With --client-url the client talks to that address (e.g. the gateway's gRPC front, clip-client's default
scheme, where its documents travel as docarray < 0.30's protobuf) while the reference answers still come from
--url's /post.

The server must already be running (the C++ harness, tests/gateway/test_clip_client.cpp, starts it); the venv
is scripts/setup-clip-client.sh's. Every answer is compared with what flowline's own Jina route (POST /post,
plain JSON through urllib, the images as "bytes_") returns for the same inputs. It checks:

  1. `Client.encode([texts, local image paths, data: URIs])` (the client reads the files itself and sends
     their bytes) gives an [N, --expect-dim] array of finite numbers, in input order, each row at cosine >=
     0.9999 with /post's embedding of the same text or image (a data: URI as its image's bytes), and the
     texts' rows unlike the images';
  2. `Client.encode(DocumentArray)` of a text and an image Document gives the same embeddings, set on the
     returned Documents;
  3. `Client.rank` of a text query whose matches are images (a path and a data: URI) and texts, and of an
     image query with text matches: every candidate comes back once, with clip_score and clip_score_cosine;
     clip_score_cosine is the cosine of /post's embeddings of the query and the candidate (within 1e-4);
     the matches are sorted by clip_score, best first, their clip_scores summing to 1 (CLIP's softmax) and
     ordered as their cosines are; the matches keep their uri (a path, a data: URI) and text;
  4. a document the server cannot decode (garbage bytes as an image) makes the client raise with the
     server's message, and /post answers it with 422, not 500.

Exit 0 when all pass ("clip_client_test: PASSED"), 1 with a message naming the failed check, 2 on bad
arguments or a missing package, 3 on the watchdog (--timeout seconds for the whole run).
"""
import base64
import json
import mimetypes
import os
import sys
import urllib.error
import urllib.request
import warnings

os.environ.setdefault('JINA_LOG_LEVEL', 'ERROR')
os.environ.setdefault('JINA_OPTOUT_TELEMETRY', '1')
warnings.filterwarnings('ignore')  # docarray 0.21 and jina warn about their own deprecations

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_check import begin, check, make_log, new_parser, run_script  # noqa: E402

NAME = 'clip_client_test'
log = make_log(NAME)
TEXTS = ['a photo of a cat', 'a red square on a white background', 'two dogs playing in the snow']
MIN_COSINE = 0.9999


def parse_args():
    p = new_parser(__doc__, 'http://127.0.0.1:PORT of the running server', "the model's embedding dimension")
    p.add_argument('--client-url', help="the client's address (default: --url), e.g. grpc://127.0.0.1:PORT")
    p.add_argument('--image', action='append', required=True,
                   help='a JPEG, PNG or WebP file to send (at least two; repeat the option)')
    args = p.parse_args()
    if len(args.image) < 2:
        p.error('give at least two --image files')
    return args


def data_uri(path):
    with open(path, 'rb') as f:
        return f'data:{mimetypes.guess_type(path)[0]};base64,' + base64.b64encode(f.read()).decode()


def image_bytes(path):
    with open(path, 'rb') as f:
        return f.read()


class Reference:
    """Embeddings from flowline's own /post route, one request per call, keyed by what was sent."""

    def __init__(self, url, dim):
        self.url = url.rstrip('/') + '/post'
        self.dim = dim

    def post(self, docs, endpoint='/encode'):
        """(status, body) of POST /post {"execEndpoint": endpoint, "data": docs}."""
        body = json.dumps({'execEndpoint': endpoint, 'data': docs}).encode()
        req = urllib.request.Request(self.url, data=body, headers={'Content-Type': 'application/json'})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors='replace')

    def embed(self, texts=(), images=()):
        """Rows of /post's embeddings: the texts', then the images' (sent as "bytes_", base64)."""
        import numpy as np

        docs = [{'text': t} for t in texts]
        docs += [{'bytes_': base64.b64encode(image_bytes(p)).decode()} for p in images]
        status, answer = self.post(docs)
        check(status == 200, f'/post /encode answered {status}: {str(answer)[:300]}')
        rows = np.asarray([d['embedding'] for d in answer['data']], dtype=np.float64)
        check(rows.shape == (len(docs), self.dim), f'/post gave embeddings of shape {rows.shape}')
        return rows


def cosine(a, b):
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def check_rows(what, got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        c = cosine(g, w)
        check(c >= MIN_COSINE, f'{what}: row {i} has cosine {c:.6f} with /post\'s embedding (want >= {MIN_COSINE})')


def check_encode_strings(client, ref, images, dim):
    import numpy as np

    inputs = TEXTS + images + [data_uri(p) for p in images]
    got = client.encode(inputs)
    check(isinstance(got, np.ndarray), f'encode(strings) returned {type(got).__name__}, expected a numpy array')
    check(got.shape == (len(inputs), dim), f'encode(strings) returned shape {got.shape}, expected '
                                           f'({len(inputs)}, {dim})')
    check(bool(np.all(np.isfinite(got))), 'encode(strings) returned a non-finite value')
    want = ref.embed(TEXTS, images)
    check_rows('encode(texts)', got[:len(TEXTS)], want[:len(TEXTS)])
    check_rows('encode(image paths)', got[len(TEXTS):len(TEXTS) + len(images)], want[len(TEXTS):])
    check_rows('encode(data: URIs)', got[len(TEXTS) + len(images):], want[len(TEXTS):])
    for i in range(len(TEXTS)):
        for j in range(len(images)):
            c = cosine(got[i], got[len(TEXTS) + j])
            check(c < 0.999, f'text {i} and image {j} have the same embedding (cosine {c:.6f})')
    log(f'encode: {len(TEXTS)} texts, {len(images)} image paths and {len(images)} data: URIs -> {got.shape}, '
        f'each at cosine >= {MIN_COSINE} with /post')
    return {'texts': want[:len(TEXTS)], 'images': want[len(TEXTS):]}


def check_encode_documents(client, want, images):
    from docarray import Document, DocumentArray

    docs = DocumentArray([Document(text=TEXTS[0]), Document(uri=images[0])])
    got = client.encode(docs)
    check(isinstance(got, DocumentArray) and len(got) == 2,
          f'encode(DocumentArray) returned {type(got).__name__} of {len(got)}, expected a DocumentArray of 2')
    check(got[0].text == TEXTS[0], f'encode(DocumentArray): doc 0 came back with text {got[0].text!r}')
    check_rows('encode(DocumentArray)', [d.embedding for d in got], [want['texts'][0], want['images'][0]])
    log('encode(DocumentArray): a text and an image Document get the same embeddings')


def check_encode_pixels(client, want, images):
    """Documents whose tensor is an image's pixels (a PIL image as numpy, as CLIP-as-service's users send them):
    uint8 [H, W, 3] of each PNG, and [H, W] of a gray one, each embedded as its file."""
    import numpy as np
    from docarray import Document, DocumentArray
    from PIL import Image

    pngs = [k for k, p in enumerate(images) if p.endswith('.png')]
    grays = [k for k in pngs if Image.open(images[k]).mode == 'L']
    check(len(pngs) >= 2 and grays, f'give two PNG --image files, one of them gray (lossless: the same pixels as '
                                    f'the file), got {images}')
    sent = pngs + grays[:1]
    docs = DocumentArray([Document(tensor=np.asarray(Image.open(images[k]).convert('RGB'))) for k in pngs])
    docs.append(Document(tensor=np.asarray(Image.open(images[grays[0]]))))  # gray: [H, W]
    check(docs[-1].tensor.ndim == 2, f'the gray image read as {docs[-1].tensor.shape}')
    got = client.encode(docs)
    check(len(got) == len(docs) and all(d.embedding is not None for d in got),
          'encode(DocumentArray of pixel tensors) did not embed every document')
    check_rows('encode(pixel tensors)', [d.embedding for d in got], [want['images'][k] for k in sent])
    log(f'encode(DocumentArray): {len(pngs)} PIL images as uint8 [H, W, 3] tensors and a gray one as [H, W], '
        f'each embedded as its file')


def check_ranked(what, query, sent, want_query, want_candidates):
    """`query`: the ranked Document; `sent`: {candidate id: index}; want_*: /post's embeddings."""
    import numpy as np

    matches = query.matches
    check(sorted(m.id for m in matches) == sorted(sent), f'{what}: the matches came back as '
                                                          f'{[m.id for m in matches]}, sent {list(sent)}')
    scores, cosines = [], []
    for m in matches:
        check('clip_score' in m.scores and 'clip_score_cosine' in m.scores,
              f'{what}: match {m.id} has scores {dict(m.scores)}, expected clip_score and clip_score_cosine')
        scores.append(m.scores['clip_score'].value)
        cosines.append(m.scores['clip_score_cosine'].value)
        want = cosine(want_query, want_candidates[sent[m.id]])
        check(abs(cosines[-1] - want) <= 1e-4,
              f'{what}: match {m.id} has clip_score_cosine {cosines[-1]:.6f}, /post\'s embeddings give {want:.6f}')
    check(scores == sorted(scores, reverse=True), f'{what}: matches not sorted by clip_score: {scores}')
    check(abs(sum(scores) - 1) <= 1e-4, f'{what}: the clip_scores sum to {sum(scores):.6f}, expected 1 (softmax)')
    check(all(0 <= s <= 1 for s in scores), f'{what}: a clip_score outside [0, 1]: {scores}')
    check(list(np.argsort(-np.asarray(cosines), kind='stable')) == list(range(len(cosines))),
          f'{what}: clip_score orders the matches otherwise than their cosines: {cosines}')
    log(f'{what}: {len(matches)} matches sorted by clip_score {[round(s, 4) for s in scores]}, summing to 1')


def check_rank(client, ref, want, images):
    from docarray import Document

    image_matches = [Document(id='image-path', uri=images[0]), Document(id='image-data', uri=data_uri(images[1]))]
    text_matches = [Document(id=f'text-{i}', text=t) for i, t in enumerate(TEXTS[1:])]
    queries = [
        Document(id='text-query', text=TEXTS[0], matches=image_matches + text_matches),
        Document(id='image-query', uri=images[0], matches=[Document(id=f'caption-{i}', text=t)
                                                           for i, t in enumerate(TEXTS)]),
    ]
    ranked = client.rank(queries)
    check(len(ranked) == 2, f'rank returned {len(ranked)} documents, expected 2')
    check([d.id for d in ranked] == ['text-query', 'image-query'], f'rank returned {[d.id for d in ranked]}')
    mixed = [want['images'][0], want['images'][1]] + list(want['texts'][1:])
    check_ranked('rank(text query; image and text matches)', ranked[0],
                 {'image-path': 0, 'image-data': 1, 'text-0': 2, 'text-1': 3}, want['texts'][0], mixed)
    check_ranked('rank(image query; text matches)', ranked[1], {f'caption-{i}': i for i in range(len(TEXTS))},
                 want['images'][0], want['texts'])
    uris = {m.id: m.uri for m in ranked[0].matches}
    check(uris['image-path'] == images[0] and uris['image-data'] == image_matches[1].uri,
          f'rank: the image matches came back without their uri: {uris}')
    texts = {m.id: m.text for m in ranked[0].matches}
    check(texts['text-0'] == TEXTS[1] and texts['text-1'] == TEXTS[2], f'rank: the text matches came back as {texts}')
    log('rank: the matches keep their uri and text')


def check_bad_image(client, ref):
    from docarray import Document

    try:
        client.encode([Document(blob=b'not an image at all', mime_type='image/png')])
    except Exception as e:  # Jina's client raises ValueError with the server's answer
        check('unknown format' in str(e), f'encode(garbage image) raised {type(e).__name__}, but without the '
                                          f'server\'s reason: {str(e)[:300]}')
    else:
        check(False, 'encode(garbage image) did not raise')
    status, answer = ref.post([{'bytes_': base64.b64encode(b'not an image at all').decode()}])
    check(status == 422, f'/post of a garbage image answered {status}, expected 422: {str(answer)[:300]}')
    log('a garbage image: the client raises with the server\'s reason; /post answers 422')


def main():
    args = parse_args()
    if begin(NAME, args) is None:
        return 2
    try:
        from clip_client import Client
        import clip_client
    except ImportError as e:
        log(f'cannot import clip_client ({e}): run scripts/setup-clip-client.sh and use .venv-clip/bin/python')
        return 2
    log(f'clip-client {clip_client.__version__} against {args.client_url or args.url}')
    client = Client(args.client_url or args.url)
    ref = Reference(args.url, args.expect_dim)
    want = check_encode_strings(client, ref, args.image, args.expect_dim)
    check_encode_documents(client, want, args.image)
    check_encode_pixels(client, want, args.image)
    check_rank(client, ref, want, args.image)
    check_bad_image(client, ref)
    log('PASSED')
    return 0


if __name__ == '__main__':
    run_script(NAME, main, 'clip_client')
