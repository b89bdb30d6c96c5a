#!/usr/bin/env python3
"""Jina's own Python client over gRPC (its default protocol) against a running `flowline serve --grpc-port`.

    .venv-clients/bin/python tests/gateway/clients/jina_grpc_client_test.py --url grpc://127.0.0.1:PORT \
        --expect-dim 384 [--reference REF.json] [--fail-marker FAIL] [--timeout 120]

The server must already be running (the C++ test harness starts it) with a flow whose executors include
the encoder (named `encoder`) and, before it, a FailIf executor that fails documents containing
--fail-marker. Uses `jina.Client(port=P)` with docarray v2 (`DocList[TextDoc]`), as a Jina user's code
does without ever naming a protocol, and checks:

  1. is_flow_ready() is True (jina.JinaGatewayDryRunRPC/dry_run);
  2. 3 texts with request_size 1 (three requests on one stream) come back in order, each with a finite
     embedding of --expect-dim floats, within --tolerance of the reference;
  3. 250 texts with request_size 100, and 1,000 texts in ONE request (request_size 1000), all come back in
     order with the embeddings of 2 for the shared texts;
  4. stream=False (jina.JinaSingleDataRequestRPC/process_single_data) gives the same;
  5. parameters and target_executor='encoder' reach the flow (the answer echoes the parameters);
  6. a document with the fail marker makes the client raise BadServer naming the executor's error, and the
     stream after it still works;
  7. a 100 MB message is refused with RESOURCE_EXHAUSTED (raised by the client), and the server serves on;
  8. a raw gRPC client that opens a stream, sends requests and goes away after the first answer leaves the
     server serving (the next post works); malformed bytes on the unary method get INVALID_ARGUMENT
     naming the method, not a crash; a big-endian embedding is INVALID_ARGUMENT naming docs[1].embedding; 5,000 documents in one
     request (over --max-documents) RESOURCE_EXHAUSTED; documents sent as docs_bytes are read, and the
     client's request id is echoed.

With --token T the server requires a bearer token, and only that is checked: a post without it raises
UNAUTHENTICATED, one with metadata ('authorization', 'Bearer T') is answered.

Exit 0 when all pass, 1 with a message naming the failed check, 2 on bad arguments, 3 on the watchdog.
"""
import os
import sys
import time

os.environ.setdefault('JINA_LOG_LEVEL', 'ERROR')
os.environ.setdefault('JINA_OPTOUT_TELEMETRY', '1')

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_check import begin, check, load_reference, make_log, new_parser, run_script  # noqa: E402

NAME = 'jina_grpc_client_test'
log = make_log(NAME)


def parse_args():
    p = new_parser(__doc__, 'grpc://127.0.0.1:PORT of the running server', 'embedding dimension')
    p.add_argument('--endpoint', default='/encode', help='the `on=` of client.post (default /encode)')
    p.add_argument('--fail-marker', default='FAIL', help="the text that makes the flow's FailIf executor fail")
    p.add_argument('--token', help='the server requires this bearer token: check only that it is enforced')
    return p.parse_args()


def texts_of(n, prefix):
    return [f'{prefix} paragraph number {i}: flowline answers Jina over gRPC.' for i in range(n)]


def main():
    args = parse_args()
    url = begin(NAME, args, ('grpc',))
    if not url:
        return 2
    import grpc
    import numpy as np
    from docarray import DocList
    from docarray.documents import TextDoc
    from jina import Client
    from jina.excepts import BadServer, BadServerFlow

    port = url.port
    client = Client(port=port)  # no protocol named: Jina's default, gRPC
    reference, texts = load_reference(args.reference)

    def post(docs_texts, **kw):
        docs = DocList[TextDoc]([TextDoc(text=t) for t in docs_texts])
        out = client.post(args.endpoint, inputs=docs, return_type=DocList[TextDoc], **kw)
        check(len(out) == len(docs), f'{len(docs)} docs posted ({kw}), {len(out)} came back')
        for i, (sent, got) in enumerate(zip(docs, out)):
            check(got.text == sent.text, f'doc {i} ({kw}): text {got.text!r} came back for {sent.text!r}')
            check(got.id == sent.id, f'doc {i} ({kw}): id {got.id!r} came back for {sent.id!r}')
            e = got.embedding
            check(e is not None, f'doc {i} ({kw}): no embedding')
            e = np.asarray(e, dtype=np.float32)
            check(e.shape == (args.expect_dim,), f'doc {i} ({kw}): embedding shape {e.shape}')
            check(bool(np.isfinite(e).all()), f'doc {i} ({kw}): embedding not finite')
        return out

    if args.token:
        one = DocList[TextDoc]([TextDoc(text='with a token')])
        try:
            client.post(args.endpoint, inputs=one)
            check(False, 'a post without the token raised nothing')
        except BadServerFlow as e:
            check('UNAUTHENTICATED' in str(e), f'a post without the token: {e}')
        out = client.post(args.endpoint, inputs=one, return_type=DocList[TextDoc],
                          metadata=(('authorization', f'Bearer {args.token}'),))
        check(len(out) == 1 and out[0].embedding is not None, 'a post with the token got no embedding back')
        log('token: refused UNAUTHENTICATED without it, answered with it')
        log('PASSED')
        return 0

    check(client.is_flow_ready(), 'is_flow_ready() returned False')
    log('1. is_flow_ready() is True')

    small = post(texts, request_size=1)
    if reference:
        for t, d in zip(texts, small):
            worst = float(np.max(np.abs(np.asarray(d.embedding) - np.asarray(reference[t], dtype=np.float32))))
            check(worst <= args.tolerance, f'{t[:40]!r}: off the reference by {worst:g} > {args.tolerance:g}')
    log('2. three requests of 1 document on one stream: in order, embeddings as the reference')

    many = texts_of(1000, 'many')
    by_text = {}
    for kw in ({'request_size': 100}, {'request_size': 1000}):
        got = post(many[:250] if kw['request_size'] == 100 else many, **kw)
        for d in got:
            v = np.asarray(d.embedding, dtype=np.float32)
            if d.text in by_text:
                worst = float(np.max(np.abs(by_text[d.text] - v)))
                check(worst <= args.tolerance, f'{kw}: {d.text[:30]!r} differs between requests by {worst:g}')
            by_text[d.text] = v
    log('3. 250 documents in requests of 100 and 1,000 in one request: all back, in order')

    unary = post(many[:250], request_size=100, stream=False, results_in_order=True)
    for d in unary:
        worst = float(np.max(np.abs(by_text[d.text] - np.asarray(d.embedding, dtype=np.float32))))
        check(worst <= args.tolerance, f'stream=False: {d.text[:30]!r} differs by {worst:g}')
    log('4. stream=False (process_single_data): the same documents and embeddings')

    responses = client.post(args.endpoint, inputs=DocList[TextDoc]([TextDoc(text='with parameters')]),
                            parameters={'answer': 42, 'who': 'flowline'}, target_executor='encoder',
                            return_type=DocList[TextDoc], return_responses=True)
    check(len(responses) == 1, f'{len(responses)} responses for one request')
    params = responses[0].parameters
    check(params.get('answer') == 42 and params.get('who') == 'flowline', f'parameters came back as {params}')
    check(responses[0].docs[0].embedding is not None, 'target_executor=encoder: no embedding')
    log('5. parameters and target_executor reach the flow')

    try:
        post(['fine', f'this one says {args.fail_marker}', 'fine too'], request_size=1)
        check(False, 'a document the flow fails raised nothing in the client')
    except BadServer as e:
        check(args.fail_marker in str(e) and 'ExecutorError' in str(e), f'BadServer without the error: {e}')
    post(texts, request_size=2)
    log("6. an executor's failure is the client's BadServer with its message; the next post works")

    try:
        client.post(args.endpoint, inputs=DocList[TextDoc]([TextDoc(text='x' * (100 << 20))]))
        check(False, 'a 100 MB message raised nothing in the client')
    except BadServerFlow as e:
        check('RESOURCE_EXHAUSTED' in str(e), f'a 100 MB message: {e}')
    post(texts, request_size=3)
    log('7. a 100 MB message: RESOURCE_EXHAUSTED; the server serves on')

    from jina.proto import jina_pb2
    from jina.types.request.data import DataRequest

    channel = grpc.insecure_channel(f'127.0.0.1:{port}')

    def requests():
        for i in range(50):  # Jina's own request class, serialized as its client does
            r = DataRequest()
            r.header.exec_endpoint = args.endpoint
            r.document_array_cls = DocList[TextDoc]
            r.data.docs = DocList[TextDoc]([TextDoc(text=f'left behind {i}')])
            yield r.proto.SerializeToString()
            time.sleep(0.01)

    stream = channel.stream_stream('/jina.JinaRPC/Call', request_serializer=None,
                                   response_deserializer=jina_pb2.DataRequestProto.FromString)
    call = stream(requests())
    first = next(call)
    check(len(first.data.docs.docs) == 1, 'the raw stream: no document in the first answer')
    call.cancel()
    unary = channel.unary_unary('/jina.JinaSingleDataRequestRPC/process_single_data',
                                request_serializer=None, response_deserializer=None)
    try:
        unary(b'\xff\xff\xff\xff garbage', timeout=10)
        check(False, 'malformed bytes were answered as a request')
    except grpc.RpcError as e:
        # The front parses the bytes itself and names the method and the message they do not parse as.
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT
              and 'does not parse as jina.DataRequestProto' in e.details()
              and 'jina.JinaSingleDataRequestRPC/process_single_data' in e.details(),
              f'malformed bytes: {e.code()} {e.details()}')

    def request_of(texts_, request_id=''):
        r = DataRequest()
        r.header.exec_endpoint = args.endpoint
        if request_id:
            r.header.request_id = request_id
        r.document_array_cls = DocList[TextDoc]
        r.data.docs = DocList[TextDoc]([TextDoc(text=t) for t in texts_])
        return r.proto

    def refused(proto, code, words, what):
        try:
            unary(proto.SerializeToString(), timeout=30)
            check(False, f'{what} was answered')
        except grpc.RpcError as e:
            check(e.code() == code and all(w in e.details() for w in words),
                  f'{what}: {e.code()} {e.details()!r}, expected {code} with {words}')

    # docs_bytes (a serialized DocListProto) instead of docs; the client's request id is echoed.
    proto = request_of(['as bytes one', 'as bytes two'], request_id='my-request-7')
    proto.data.docs_bytes = proto.data.docs.SerializeToString()  # the oneof: docs is cleared
    answer = jina_pb2.DataRequestProto.FromString(unary(proto.SerializeToString(), timeout=30))
    check(answer.header.request_id == 'my-request-7', f'request id came back as {answer.header.request_id!r}')
    got = [d.data['text'].text for d in answer.data.docs.docs]
    check(got == ['as bytes one', 'as bytes two'], f'docs_bytes: {got} came back')
    check(all(d.data['embedding'].ndarray.dense.dtype == '<f4' and d.data['embedding'].type == 'ndarray'
              for d in answer.data.docs.docs), 'docs_bytes: embeddings not as docarray ndarrays of <f4')
    # A document flowline cannot read is named; too many documents are RESOURCE_EXHAUSTED.
    proto = request_of(['x', 'y'])
    emb = proto.data.docs.docs[1].data['embedding'].ndarray.dense
    emb.buffer, emb.dtype = b'\0' * 8, '>f4'
    emb.shape.append(2)
    refused(proto, grpc.StatusCode.INVALID_ARGUMENT, ['docs[1].embedding', "'>f4'"], 'a big-endian embedding')
    refused(request_of([f't{i}' for i in range(5000)]), grpc.StatusCode.RESOURCE_EXHAUSTED,
            ['5000 documents', '--max-documents'], '5,000 documents in one request')
    channel.close()
    post(texts, request_size=1)
    check(client.is_flow_ready(), 'is_flow_ready() is False after a client went away')
    log('8. a client gone mid-stream, malformed bytes, an unreadable document and 5,000 documents: refused '
        'with their codes, the server serving on; docs_bytes read, request ids echoed')
    log('PASSED')
    return 0


if __name__ == '__main__':
    run_script(NAME, main, 'the Jina client')
