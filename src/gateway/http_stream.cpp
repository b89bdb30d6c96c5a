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
#include "http_stream.hpp"

#include "flowline/flow_config.hpp"
#include "flowline/io.hpp"
#include "flowline/version.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>

#include <cstring>

namespace flowline::gateway {

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

bool NdjsonStream::requested(const http::request_header<>& header) {
  return header.method() == http::verb::post && is_ndjson(header[http::field::content_type]);
}

NdjsonStream::NdjsonStream(std::shared_ptr<Connection> connection, Core& core)
    : connection_(std::move(connection)), core_(core), ticker_(connection_->transport().get_executor()) {}

void NdjsonStream::start(const std::shared_ptr<Connection>& connection,
                         http::request_parser<http::string_body>& parser) {
  const auto& request = connection->request();
  Core& core = connection->core();
  const std::string_view target = request.target();
  const std::string path(target.substr(0, target.find('?')));
  try {
    if (!connection->authorized()) {
      return connection->reply(401,
                               plain_error(401, "authentication_error",
                                           "missing or wrong bearer token (send \"Authorization: Bearer <token>\")")
                                   .body);
    }
    if (path != "/default" && !core.endpoints.count(path)) {
      throw plain_error(404, "not_found",
                        fmt::format("'{}' is not an endpoint of the flow: NDJSON streams go to "
                                    "POST /default or POST /<endpoint>",
                                    path));
    }
    if (!core.serving()) throw plain_error(503, "unavailable", "the gateway is draining: try another replica");
    auto st = std::make_shared<NdjsonStream>(connection, core);
    st->endpoint_ = path == "/default" ? "/" : path;
    st->target_ = std::string(request["Flowline-Target-Executor"]);
    if (const std::string_view p = request["Flowline-Parameters"]; !p.empty()) {
      const json::value v = parse_body(p, core.limits, false);
      if (!v.is_object())
        throw plain_error(400, "invalid_request_error", "Flowline-Parameters: expected a JSON object");
      st->parameters_ = v.get_object();
    }
    st->chunk_size_ = std::max<std::size_t>(1, core.flow.config().options.request_size);
    st->parser_.emplace(std::move(parser));
    st->parser_->body_limit(boost::none);  // bounded per line and by max_stream_documents instead
    if (st->parser_->is_done()) {          // no body at all
      st->input_done_ = true;
      connection->keep_alive(request.keep_alive());
    }
    st->header_.result(http::status::ok);
    st->header_.version(request.version());
    st->header_.set(http::field::server, "flowline/" FLOWLINE_VERSION_STRING);
    st->header_.set(http::field::content_type, "application/x-ndjson");
    st->header_.chunked(true);
    connection->transport().expires_never();  // the stream's own ticker bounds every wait
    st->watch();
    st->pump();
  } catch (const HttpError& e) {
    connection->reply(e.status, e.body);
  }
}

// Moves the stream on as far as it can: chunks into free slots, the body while there is room, answers in
// order, and the end once everything up to the last chunk (or the error) is written.
void NdjsonStream::pump() {
  if (finished_) return;
  while (!waiting_.empty() && submit()) {
  }
  if (!reading_ && !input_done_ && !stopped() && waiting_.empty() && held() < kStreamWindow) {
    if (core_.draining()) {
      error(503, "unavailable", fmt::format("the gateway is stopping: lines from {} on were not read", lines_ + 1));
    } else {
      read();
    }
  }
  write();
  // An error clears what comes after it, so a stopped stream has nothing left to close.
  const bool all_closed = (input_done_ || stopped()) && chunk_.empty() && waiting_.empty();
  if (all_closed && !writing_ && window_.all_written()) finish();
}

void NdjsonStream::read() {
  reading_ = true;
  read_since_ = Clock::now();
  parser_->get().body().data = in_.data();
  parser_->get().body().size = in_.size();
  http::async_read_some(connection_->transport(), connection_->read_buffer(), *parser_,
                        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
}

void NdjsonStream::on_read(beast::error_code ec) {
  reading_ = false;
  if (finished_) return;
  if (ec == http::error::need_buffer) ec = {};
  if (ec) {
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted || ec == http::error::partial_message) {
      return abort();  // the client went away
    }
    error(400, "invalid_request_error", fmt::format("malformed request body after line {}: {}", lines_, ec.message()));
    return pump();
  }
  const std::size_t got = in_.size() - parser_->get().body().size;
  take_lines(in_.data(), got);
  if (parser_->is_done() && !stopped()) {
    input_done_ = true;
    connection_->keep_alive(connection_->request().keep_alive());
    if (!line_.empty()) {
      std::string last = std::move(line_);
      take_line(last);
    }
    close_chunk();
  }
  pump();
}

void NdjsonStream::take_lines(const char* data, std::size_t size) {
  while (size > 0 && !stopped()) {
    const char* newline = static_cast<const char*>(std::memchr(data, '\n', size));
    const std::size_t take = newline ? static_cast<std::size_t>(newline - data) : size;
    if (line_.size() + take > core_.options.max_body_bytes) {
      return error(
          413, "request_too_large",
          fmt::format("line {} is longer than {} bytes (--max-body-bytes)", lines_ + 1, core_.options.max_body_bytes));
    }
    if (!newline) {
      line_.append(data, size);
      return;
    }
    std::string_view line(data, take);
    if (!line_.empty()) {
      line_.append(data, take);
      line = line_;
    }
    take_line(line);
    line_.clear();
    data += take + 1;
    size -= take + 1;
  }
}

void NdjsonStream::take_line(std::string_view line) {
  ++lines_;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == std::string_view::npos) return;
  if (documents_ >= core_.options.max_stream_documents) {
    return error(413, "request_too_large",
                 fmt::format("line {}: more than {} documents in one stream (--max-stream-documents)", lines_,
                             core_.options.max_stream_documents));
  }
  try {
    const json::value v = parse_body(line, core_.limits, false);
    Document doc;
    if (v.is_string()) {
      doc.text = std::string(v.get_string());
    } else {
      doc = jina_document(v, documents_);
    }
    if (chunk_.empty()) chunk_first_line_ = lines_;
    chunk_.push_back(std::move(doc));
    ++documents_;
  } catch (const HttpError& e) {
    return error(400, "invalid_request_error",
                 fmt::format("line {}: {} (expected a document object or a string)", lines_, e.what()));
  }
  if (chunk_.size() >= chunk_size_) close_chunk();
}

// The chunk being filled gets its number and waits for an in-flight slot.
void NdjsonStream::close_chunk() {
  if (chunk_.empty()) return;
  waiting_.push_back(Closed{window_.open(), std::move(chunk_), chunk_first_line_});
  chunk_ = DocumentArray();
}

// Submits the oldest waiting chunk when an in-flight slot is free; false when none is.
bool NdjsonStream::submit() {
  if (!core_.try_enter()) return false;
  Closed c = std::move(waiting_.front());
  waiting_.pop_front();
  auto cancel = std::make_shared<Cancellation::Flag>(false);
  in_flow_[c.seq] = Submitted{Clock::now(), c.first_line, c.first_line + c.docs.size() - 1, cancel};
  const std::uint64_t seq = c.seq;
  try {
    core_.flow.submit(endpoint_, std::move(c.docs), parameters_, target_, std::move(cancel),
                      [self = shared_from_this(), seq](Response&& response) {
                        asio::post(self->ticker_.get_executor(), [self, seq, response = std::move(response)]() mutable {
                          self->done(seq, std::move(response));
                        });
                      });
  } catch (const std::exception& e) {
    core_.leave();
    in_flow_.erase(seq);
    error(503, "unavailable", e.what());
  }
  return true;
}

void NdjsonStream::done(std::uint64_t seq, Response&& response) {
  core_.leave();
  const auto it = in_flow_.find(seq);
  if (it == in_flow_.end()) return;
  const Submitted where = it->second;
  in_flow_.erase(it);
  if (finished_ || !window_.accepts(seq)) return;
  if (!response.ok()) {
    end_at(seq, 500, "executor_error",
           fmt::format("lines {}-{}: executor '{}' failed: {}", where.first_line, where.last_line,
                       response.error_executor, response.error),
           where.first_line);
    return pump();
  }
  Piece piece;
  piece.documents = response.docs.size();
  piece.text.reserve(response.docs.size() * 160);
  for (const Document& doc : response.docs) {
    append_jina_document(piece.text, doc);
    piece.text += '\n';
  }
  window_.put(seq, std::move(piece));
  pump();
}

// Ends the stream at the current line: what came before is still answered, then this error.
void NdjsonStream::error(int status, std::string_view type, std::string message) {
  if (stopped()) return;
  close_chunk();
  end_at(window_.open(), status, type, std::move(message), lines_);
}

// The error at position `seq` ends the stream: what comes after it (answered, waiting or being read) is
// dropped; what comes before it is still answered.
void NdjsonStream::end_at(std::uint64_t seq, int status, std::string_view type, std::string message, std::size_t line) {
  std::erase_if(waiting_, [seq](const Closed& c) { return c.seq > seq; });
  cancel_from(seq);
  chunk_ = DocumentArray();
  connection_->keep_alive(false);
  std::string error_line = fmt::format("{{\"error\":{{\"message\":{},\"type\":\"{}\",\"code\":{},\"line\":{}}}}}\n",
                                       json::serialize(json::string(message)), type, status, line);
  window_.close_with(seq, Piece{std::move(error_line), 0, status, plain_error(status, type, message).body});
}

void NdjsonStream::write() {
  if (writing_) return;
  Piece* next = window_.next();
  if (!next) return;
  auto self = shared_from_this();
  if (!header_sent_) {
    if (next->status != 200) {  // nothing written yet: a plain answer says it
      finished_ = true;
      ticker_.cancel();
      return connection_->reply(next->status, std::move(next->error_body));
    }
    header_sent_ = true;
    writing_ = true;
    write_since_ = Clock::now();
    serializer_.emplace(header_);
    return http::async_write_header(connection_->transport(), *serializer_, [self](beast::error_code ec, std::size_t) {
      self->writing_ = false;
      if (ec) return self->abort();
      self->pump();
    });
  }
  Piece piece = std::move(*window_.take_next());
  out_ = std::move(piece.text);
  written_documents_ += piece.documents;
  writing_ = true;
  write_since_ = Clock::now();
  asio::async_write(connection_->transport(), http::make_chunk(asio::buffer(out_)),
                    [self](beast::error_code ec, std::size_t) {
                      self->writing_ = false;
                      self->out_.clear();
                      if (ec) return self->abort();
                      self->pump();
                    });
}

void NdjsonStream::finish() {
  finished_ = true;
  ticker_.cancel();
  if (!header_sent_) return connection_->reply(200, "", "application/x-ndjson");  // an empty input: an empty answer
  connection_->count_answer(stopped() ? 500 : 200, written_documents_);
  if (core_.draining()) connection_->keep_alive(false);
  writing_ = true;
  asio::async_write(connection_->transport(), http::make_chunk_last(),
                    [self = shared_from_this()](beast::error_code ec, std::size_t) {
                      self->writing_ = false;
                      self->connection_->stream_written(!ec);
                    });
}

// Every kStreamTick: retries chunks that found no slot, and enforces idle_timeout on the client (reading
// or writing) and request_timeout on the oldest chunk in the flow.
void NdjsonStream::watch() {
  ticker_.expires_after(kStreamTick);
  ticker_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->finished_) return;
    const auto now = Clock::now();
    const auto idle = self->core_.options.idle_timeout;
    if ((self->reading_ && now - self->read_since_ > idle) || (self->writing_ && now - self->write_since_ > idle)) {
      return self->abort();
    }
    if (!self->in_flow_.empty()) {
      const auto& [seq, oldest] = *self->in_flow_.begin();
      if (self->window_.accepts(seq) && now - oldest.at > self->core_.options.request_timeout) {
        self->core_.timed_out++;
        const std::string message =
            fmt::format("lines {}-{}: the flow did not answer within {} ms (--request-timeout)", oldest.first_line,
                        oldest.last_line, self->core_.options.request_timeout.count());
        self->end_at(seq, 504, "timeout", message, oldest.first_line);
      }
    }
    self->pump();
    if (!self->finished_) self->watch();
  });
}

// The client went away or stopped reading: close; chunks still in the flow are cancelled and release their
// slots when they come back.
void NdjsonStream::cancel_from(std::uint64_t seq) {
  for (auto it = in_flow_.lower_bound(seq); it != in_flow_.end(); ++it) it->second.cancel->store(true);
}

void NdjsonStream::abort() {
  cancel_from(0);
  if (!finished_) {
    finished_ = true;
    ticker_.cancel();
    // Not answered: not in stats(); the client's going away is no refusal of the gateway's ("abandoned").
    connection_->stream_abandoned();
  } else {
    connection_->shutdown();
  }
}

}  // namespace flowline::gateway
