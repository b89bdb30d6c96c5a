// NDJSON streams through the gateway: inputs larger than a request body, answered as they are encoded.
//
// `POST /<endpoint>` (or `/default`) with `Content-Type: application/x-ndjson` (also application/jsonl):
// every line of the body (chunked or with a length) is one document, a Jina document object or a JSON
// string (its text); blank lines are skipped. The answer is `200`, `Transfer-Encoding: chunked`,
// `Content-Type: application/x-ndjson`: one Jina document per line, in input order. Request parameters and
// the target executor come in the headers `Flowline-Parameters` (a JSON object) and
// `Flowline-Target-Executor`.
//
// Lines are gathered into chunks of the flow's request_size documents; each chunk is one Flow::submit()
// and takes one of the gateway's in-flight slots (so streams and plain requests share --max-in-flight and
// the executors' batches). Backpressure: the body is read only while fewer than kStreamWindow chunks are
// held (in the flow, or answered and waiting to be written), so a client that sends faster than the flow
// encodes, or that does not read its answers, is slowed by TCP, and the gateway holds at most
// kStreamWindow x request_size documents per stream, whatever the input size.
//
// Errors: a line that is not JSON or not a document, a line longer than max_body_bytes, more than
// max_stream_documents documents, an executor failure, a chunk the flow does not answer within
// request_timeout, or the gateway stopping, end the stream at that line: the documents before it are
// answered, then one line {"error": {"message", "type", "code", "line"}} ends the answer and the
// connection closes. Before anything was written, the error is a plain answer with its status instead.
// A client silent (not sending, or not reading) for idle_timeout is disconnected.
#include "http_front.hpp"

#include "flowline/flow_config.hpp"
#include "flowline/io.hpp"
#include "flowline/version.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <deque>
#include <map>

namespace flowline {

namespace {

// Chunks of one stream held at once: submitted to the flow, or answered and not yet written.
constexpr std::size_t kStreamWindow = 8;
// How often a stream checks its timeouts and retries a chunk that found no free in-flight slot.
constexpr std::chrono::milliseconds kStreamTick{2};

bool is_ndjson(std::string_view content_type) {
  const std::string_view type = content_type.substr(0, content_type.find(';'));
  for (std::string_view known : {"application/x-ndjson", "application/ndjson", "application/jsonl",
                                 "application/x-jsonlines", "application/jsonlines"}) {
    if (beast::iequals(type, known)) return true;
  }
  return false;
}

}  // namespace

struct NdjsonStream {
  explicit NdjsonStream(const asio::any_io_executor& executor) : ticker(executor) {}

  // The request.
  std::optional<http::request_parser<http::buffer_body>> parser;
  std::string endpoint, target;
  json::object parameters;
  std::size_t chunk_size = 100;

  // Input: the line being read, counters, the chunk being filled and chunks waiting for a slot.
  std::array<char, 64 * 1024> in{};
  std::string line;
  std::size_t lines = 0;      // complete lines read
  std::size_t documents = 0;  // documents taken from them
  DocumentArray chunk;
  std::size_t chunk_first_line = 0;
  struct Closed {
    std::uint64_t seq;
    DocumentArray docs;
    std::size_t first_line;
  };
  std::deque<Closed> waiting;  // closed chunks that found no in-flight slot yet

  // Sequence: every chunk (and the error that ends a stream) has a number; answers go out in that order.
  std::uint64_t next_seq = 0, next_write = 0;
  struct Submitted {
    Clock::time_point at;
    std::size_t first_line, last_line;
  };
  std::map<std::uint64_t, Submitted> in_flow;
  struct Piece {
    std::string text;  // NDJSON lines, or the error line
    std::size_t documents = 0;
    int status = 200;        // not 200: the error that ends the stream
    std::string error_body;  // the error as a plain answer, when nothing was written yet
  };
  std::map<std::uint64_t, Piece> answered;
  std::optional<std::uint64_t> end_seq;  // set by an error: nothing from this number on is written

  // Output.
  bool reading = false, writing = false, input_done = false, header_sent = false, finished = false;
  Clock::time_point read_since, write_since;
  std::size_t written_documents = 0;
  std::string out;
  http::response<http::empty_body> header;
  std::optional<http::response_serializer<http::empty_body>> serializer;
  asio::steady_timer ticker;

  std::size_t held() const { return in_flow.size() + answered.size() + waiting.size(); }
  bool stopped() const { return end_seq.has_value(); }
};

bool Connection::stream_requested() const {
  const auto& request = parser_->get();
  return request.method() == http::verb::post && is_ndjson(request[http::field::content_type]);
}

void Connection::start_stream() {
  request_.base() = parser_->get().base();
  keep_alive_ = false;  // until the body has been read whole
  route_ = Route::JinaStream;
  const std::string_view target = request_.target();
  const std::string path(target.substr(0, target.find('?')));
  try {
    if (!authorized()) {
      return reply(401, gateway::plain_error(401, "authentication_error",
                                             "missing or wrong bearer token (send \"Authorization: Bearer <token>\")")
                            .body);
    }
    if (path != "/default" && !gw_.core.endpoints.count(path)) {
      throw gateway::plain_error(404, "not_found",
                                 fmt::format("'{}' is not an endpoint of the flow: NDJSON streams go to "
                                             "POST /default or POST /<endpoint>",
                                             path));
    }
    if (!gw_.core.serving)
      throw gateway::plain_error(503, "unavailable", "the gateway is draining: try another replica");
    auto st = std::make_shared<NdjsonStream>(stream_.get_executor());
    st->endpoint = path == "/default" ? "/" : path;
    st->target = std::string(request_["Flowline-Target-Executor"]);
    if (const std::string_view p = request_["Flowline-Parameters"]; !p.empty()) {
      const json::value v = gateway::parse_body(p, gw_.core.limits, false);
      if (!v.is_object())
        throw gateway::plain_error(400, "invalid_request_error", "Flowline-Parameters: expected a JSON object");
      st->parameters = v.get_object();
    }
    st->chunk_size = std::max<std::size_t>(1, gw_.core.flow.config().options.request_size);
    st->parser.emplace(std::move(*parser_));
    parser_.reset();
    st->parser->body_limit(boost::none);  // bounded per line and by max_stream_documents instead
    if (st->parser->is_done()) {          // no body at all
      st->input_done = true;
      keep_alive_ = request_.keep_alive();
    }
    st->header.result(http::status::ok);
    st->header.version(request_.version());
    st->header.set(http::field::server, "flowline/" FLOWLINE_VERSION_STRING);
    st->header.set(http::field::content_type, "application/x-ndjson");
    st->header.chunked(true);
    stream_.expires_never();  // the stream's own ticker bounds every wait
    ndjson_ = st;
    stream_watch(st);
    stream_pump();
  } catch (const gateway::HttpError& e) {
    reply(e.status, e.body);
  }
}

// Moves the stream on as far as it can: chunks into free slots, the body while there is room, answers in
// order, and the end once everything up to the last chunk (or the error) is written.
void Connection::stream_pump() {
  const auto st = ndjson_;
  if (!st || st->finished) return;
  while (!st->waiting.empty() && stream_submit(*st)) {
  }
  if (!st->reading && !st->input_done && !st->stopped() && st->waiting.empty() && st->held() < kStreamWindow) {
    if (gw_.core.draining) {
      stream_error(*st, 503, "unavailable",
                   fmt::format("the gateway is stopping: lines from {} on were not read", st->lines + 1));
    } else {
      stream_read();
    }
  }
  stream_write(*st);
  // An error clears what comes after it, so a stopped stream has nothing left to close.
  const bool all_closed = (st->input_done || st->stopped()) && st->chunk.empty() && st->waiting.empty();
  const std::uint64_t last = st->end_seq ? *st->end_seq + 1 : st->next_seq;
  if (all_closed && !st->writing && st->next_write == last) stream_finish(*st);
}

void Connection::stream_read() {
  auto st = ndjson_;
  st->reading = true;
  st->read_since = Clock::now();
  st->parser->get().body().data = st->in.data();
  st->parser->get().body().size = st->in.size();
  http::async_read_some(
      stream_, buffer_, *st->parser,
      [self = shared_from_this(), st](beast::error_code ec, std::size_t) { self->on_stream_read(st, ec); });
}

void Connection::on_stream_read(const std::shared_ptr<NdjsonStream>& st, beast::error_code ec) {
  st->reading = false;
  if (ndjson_ != st || st->finished) return;
  if (ec == http::error::need_buffer) ec = {};
  if (ec) {
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted || ec == http::error::partial_message) {
      return stream_abort();  // the client went away
    }
    stream_error(*st, 400, "invalid_request_error",
                 fmt::format("malformed request body after line {}: {}", st->lines, ec.message()));
    return stream_pump();
  }
  const std::size_t got = st->in.size() - st->parser->get().body().size;
  stream_lines(*st, st->in.data(), got);
  if (st->parser->is_done() && !st->stopped()) {
    st->input_done = true;
    keep_alive_ = request_.keep_alive();
    if (!st->line.empty()) {
      std::string last = std::move(st->line);
      stream_line(*st, last);
    }
    stream_close_chunk(*st);
  }
  stream_pump();
}

void Connection::stream_lines(NdjsonStream& st, const char* data, std::size_t size) {
  while (size > 0 && !st.stopped()) {
    const char* newline = static_cast<const char*>(std::memchr(data, '\n', size));
    const std::size_t take = newline ? static_cast<std::size_t>(newline - data) : size;
    if (st.line.size() + take > gw_.core.options.max_body_bytes) {
      return stream_error(st, 413, "request_too_large",
                          fmt::format("line {} is longer than {} bytes (--max-body-bytes)", st.lines + 1,
                                      gw_.core.options.max_body_bytes));
    }
    if (!newline) {
      st.line.append(data, size);
      return;
    }
    std::string_view line(data, take);
    if (!st.line.empty()) {
      st.line.append(data, take);
      line = st.line;
    }
    stream_line(st, line);
    st.line.clear();
    data += take + 1;
    size -= take + 1;
  }
}

void Connection::stream_line(NdjsonStream& st, std::string_view line) {
  ++st.lines;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == std::string_view::npos) return;
  if (st.documents >= gw_.core.options.max_stream_documents) {
    return stream_error(st, 413, "request_too_large",
                        fmt::format("line {}: more than {} documents in one stream (--max-stream-documents)", st.lines,
                                    gw_.core.options.max_stream_documents));
  }
  try {
    const json::value v = gateway::parse_body(line, gw_.core.limits, false);
    Document doc;
    if (v.is_string()) {
      doc.text = std::string(v.get_string());
    } else {
      doc = gateway::jina_document(v, st.documents);
    }
    if (st.chunk.empty()) st.chunk_first_line = st.lines;
    st.chunk.push_back(std::move(doc));
    ++st.documents;
  } catch (const gateway::HttpError& e) {
    return stream_error(st, 400, "invalid_request_error",
                        fmt::format("line {}: {} (expected a document object or a string)", st.lines, e.what()));
  }
  if (st.chunk.size() >= st.chunk_size) stream_close_chunk(st);
}

// The chunk being filled gets its number and waits for an in-flight slot.
void Connection::stream_close_chunk(NdjsonStream& st) {
  if (st.chunk.empty()) return;
  st.waiting.push_back(NdjsonStream::Closed{st.next_seq++, std::move(st.chunk), st.chunk_first_line});
  st.chunk = DocumentArray();
}

// Submits the oldest waiting chunk when an in-flight slot is free; false when none is.
bool Connection::stream_submit(NdjsonStream& st) {
  if (!gw_.core.try_enter()) return false;
  NdjsonStream::Closed c = std::move(st.waiting.front());
  st.waiting.pop_front();
  st.in_flow[c.seq] = NdjsonStream::Submitted{Clock::now(), c.first_line, c.first_line + c.docs.size() - 1};
  auto self = shared_from_this();
  auto owner = ndjson_;
  const std::uint64_t seq = c.seq;
  try {
    gw_.core.flow.submit(
        st.endpoint, std::move(c.docs), st.parameters, st.target, [self, owner, seq](Response&& response) {
          asio::post(self->stream_.get_executor(), [self, owner, seq, response = std::move(response)]() mutable {
            self->stream_done(owner, seq, std::move(response));
          });
        });
  } catch (const std::exception& e) {
    gw_.core.leave();
    st.in_flow.erase(seq);
    stream_error(st, 503, "unavailable", e.what());
  }
  return true;
}

void Connection::stream_done(const std::shared_ptr<NdjsonStream>& st, std::uint64_t seq, Response&& response) {
  gw_.core.leave();
  const auto it = st->in_flow.find(seq);
  if (it == st->in_flow.end()) return;
  const NdjsonStream::Submitted where = it->second;
  st->in_flow.erase(it);
  if (ndjson_ != st || st->finished || (st->end_seq && seq >= *st->end_seq)) return;
  if (!response.ok()) {
    stream_end_at(*st, seq, 500, "executor_error",
                  fmt::format("lines {}-{}: executor '{}' failed: {}", where.first_line, where.last_line,
                              response.error_executor, response.error),
                  where.first_line);
    return stream_pump();
  }
  NdjsonStream::Piece piece;
  piece.documents = response.docs.size();
  piece.text.reserve(response.docs.size() * 160);
  for (const Document& doc : response.docs) {
    gateway::append_jina_document(piece.text, doc);
    piece.text += '\n';
  }
  st->answered[seq] = std::move(piece);
  stream_pump();
}

// Ends the stream at the current line: what came before is still answered, then this error.
void Connection::stream_error(NdjsonStream& st, int status, std::string_view type, std::string message) {
  if (st.stopped()) return;
  stream_close_chunk(st);
  stream_end_at(st, st.next_seq++, status, type, std::move(message), st.lines);
}

// The error at position `seq` ends the stream: what comes after it (answered, waiting or being read) is
// dropped; what comes before it is still answered.
void Connection::stream_end_at(NdjsonStream& st, std::uint64_t seq, int status, std::string_view type,
                               std::string message, std::size_t line) {
  st.end_seq = seq;
  st.answered.erase(st.answered.upper_bound(seq), st.answered.end());
  std::erase_if(st.waiting, [seq](const NdjsonStream::Closed& c) { return c.seq > seq; });
  st.chunk = DocumentArray();
  keep_alive_ = false;
  std::string error_line = fmt::format("{{\"error\":{{\"message\":{},\"type\":\"{}\",\"code\":{},\"line\":{}}}}}\n",
                                       json::serialize(json::string(message)), type, status, line);
  st.answered[seq] =
      NdjsonStream::Piece{std::move(error_line), 0, status, gateway::plain_error(status, type, message).body};
}

void Connection::stream_write(NdjsonStream& st) {
  if (st.writing) return;
  const auto next = st.answered.find(st.next_write);
  if (next == st.answered.end()) return;
  auto self = shared_from_this();
  auto owner = ndjson_;
  if (!st.header_sent) {
    if (next->second.status != 200) {  // nothing written yet: a plain answer says it
      st.finished = true;
      st.ticker.cancel();
      const int status = next->second.status;
      std::string body = std::move(next->second.error_body);
      ndjson_.reset();
      return reply(status, std::move(body));
    }
    st.header_sent = true;
    st.writing = true;
    st.write_since = Clock::now();
    st.serializer.emplace(st.header);
    return http::async_write_header(stream_, *st.serializer, [self, owner](beast::error_code ec, std::size_t) {
      owner->writing = false;
      if (ec) return self->stream_abort();
      self->stream_pump();
    });
  }
  st.out = std::move(next->second.text);
  st.written_documents += next->second.documents;
  st.answered.erase(next);
  ++st.next_write;
  st.writing = true;
  st.write_since = Clock::now();
  asio::async_write(stream_, http::make_chunk(asio::buffer(st.out)), [self, owner](beast::error_code ec, std::size_t) {
    owner->writing = false;
    owner->out.clear();
    if (ec) return self->stream_abort();
    self->stream_pump();
  });
}

void Connection::stream_finish(NdjsonStream& st) {
  st.finished = true;
  st.ticker.cancel();
  if (!st.header_sent) {  // an empty input: an empty answer
    ndjson_.reset();
    return reply(200, "", "application/x-ndjson");
  }
  count_answer(st.stopped() ? 500 : 200, st.written_documents);
  if (gw_.core.draining) keep_alive_ = false;
  auto self = shared_from_this();
  auto owner = ndjson_;
  st.writing = true;
  asio::async_write(stream_, http::make_chunk_last(), [self, owner](beast::error_code ec, std::size_t) {
    owner->writing = false;
    self->ndjson_.reset();
    if (ec) return self->shutdown();
    if (!self->keep_alive_) return self->linger_close();
    self->request_ = {};
    self->read_header();
  });
}

// Every kStreamTick: retries chunks that found no slot, and enforces idle_timeout on the client (reading
// or writing) and request_timeout on the oldest chunk in the flow.
void Connection::stream_watch(const std::shared_ptr<NdjsonStream>& st) {
  st->ticker.expires_after(kStreamTick);
  st->ticker.async_wait([self = shared_from_this(), st](beast::error_code ec) {
    if (ec || st->finished || self->ndjson_ != st) return;
    const auto now = Clock::now();
    const auto idle = self->gw_.core.options.idle_timeout;
    if ((st->reading && now - st->read_since > idle) || (st->writing && now - st->write_since > idle)) {
      return self->stream_abort();
    }
    if (!st->in_flow.empty()) {
      const auto& [seq, oldest] = *st->in_flow.begin();
      const bool before_end = !st->end_seq || seq < *st->end_seq;
      if (before_end && now - oldest.at > self->gw_.core.options.request_timeout) {
        self->gw_.core.timed_out++;
        const std::string message =
            fmt::format("lines {}-{}: the flow did not answer within {} ms (--request-timeout)", oldest.first_line,
                        oldest.last_line, self->gw_.core.options.request_timeout.count());
        self->stream_end_at(*st, seq, 504, "timeout", message, oldest.first_line);
      }
    }
    self->stream_pump();
    if (!st->finished) self->stream_watch(st);
  });
}

// The client went away or stopped reading: close; chunks still in the flow release their slots when they
// come back.
void Connection::stream_abort() {
  if (const auto st = ndjson_) {
    st->finished = true;
    st->ticker.cancel();
    // Not answered: not in stats(); the client's going away is no refusal of the gateway's ("abandoned").
    gw_.core.metrics->record_request(gateway::FrontKind::Http, route_, 499, "abandoned", 0, elapsed_seconds());
  }
  ndjson_.reset();
  shutdown();
}

}  // namespace flowline
