// The NDJSON stream of the HTTP front: one request of a Connection (http_front.hpp) whose body is read and
// answered one document per line, in chunks, while the flow encodes them. http_stream.cpp says what the
// client sees; this header what the connection hands over. Private to flowline::gateway.
//
// Lifetime and threads: start() takes the connection's parser once the header is read; the stream then
// holds the Connection (a shared_ptr) and is held by its own pending operations (a read, a write, its
// ticker, the flow's callbacks), all of which run on the connection's strand. When it ends it hands the
// connection back: the next request is read, or the connection closes. The order of the answers is an
// AnswerWindow (answer_window.hpp), as for the gRPC front's streams.
#pragma once

#include "answer_window.hpp"
#include "http_front.hpp"

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace flowline::gateway {

class NdjsonStream : public std::enable_shared_from_this<NdjsonStream> {
 public:
  // Whether a request with this header asks for a stream: a POST with an NDJSON Content-Type.
  static bool requested(const http::request_header<>& header);
  // Checks the request (token, endpoint, draining, Flowline-Parameters) and starts answering it on
  // `connection`; a request refused here is answered by the connection as a plain answer.
  static void start(const std::shared_ptr<Connection>& connection, http::request_parser<http::string_body>& parser);

  NdjsonStream(std::shared_ptr<Connection> connection, Core& core);

 private:
  struct Closed {  // a chunk of documents with its number, waiting for an in-flight slot
    std::uint64_t seq;
    DocumentArray docs;
    std::size_t first_line;
  };
  struct Submitted {  // a chunk inside the flow
    Clock::time_point at;
    std::size_t first_line, last_line;
    // Set when nobody will read the chunk's answer (the stream ended before it, or the client went away):
    // the flow drops the chunk or its handler stops at its next check.
    std::shared_ptr<Cancellation::Flag> cancel;
  };
  struct Piece {       // an answered chunk, or the error that ends the stream
    std::string text;  // NDJSON lines, or the error line
    std::size_t documents = 0;
    int status = 200;        // not 200: the error that ends the stream
    std::string error_body;  // the error as a plain answer, when nothing was written yet
  };

  void pump();  // submits, reads, writes and finishes as far as the state allows
  void read();
  void on_read(beast::error_code ec);
  void take_lines(const char* data, std::size_t size);
  void take_line(std::string_view line);
  void close_chunk();
  bool submit();
  void done(std::uint64_t seq, Response&& response);
  void error(int status, std::string_view type, std::string message);
  void end_at(std::uint64_t seq, int status, std::string_view type, std::string message, std::size_t line);
  void write();
  void finish();
  void watch();
  void abort();
  void cancel_from(std::uint64_t seq);  // sets the flags of the chunks in the flow numbered seq and after

  std::size_t held() const { return in_flow_.size() + window_.held() + waiting_.size(); }
  bool stopped() const { return window_.closed(); }

  std::shared_ptr<Connection> connection_;
  Core& core_;

  // The request.
  std::optional<http::request_parser<http::buffer_body>> parser_;
  std::string endpoint_, target_;
  json::object parameters_;
  std::size_t chunk_size_ = 100;
  bool keep_alive_ = false;  // the connection's, once the body has been read whole

  // Input: the line being read, counters, the chunk being filled and chunks waiting for a slot.
  std::array<char, 64 * 1024> in_{};
  std::string line_;
  std::size_t lines_ = 0;      // complete lines read
  std::size_t documents_ = 0;  // documents taken from them
  DocumentArray chunk_;
  std::size_t chunk_first_line_ = 0;
  std::deque<Closed> waiting_;  // closed chunks that found no in-flight slot yet

  // Every chunk (and the error that ends the stream) has a number; answers go out in that order.
  std::map<std::uint64_t, Submitted> in_flow_;
  AnswerWindow<Piece> window_;

  // Output.
  bool reading_ = false, writing_ = false, input_done_ = false, header_sent_ = false, finished_ = false;
  Clock::time_point read_since_, write_since_;
  std::size_t written_documents_ = 0;
  std::string out_;
  http::response<http::empty_body> header_;
  std::optional<http::response_serializer<http::empty_body>> serializer_;
  asio::steady_timer ticker_;
};

}  // namespace flowline::gateway
