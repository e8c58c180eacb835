// The judge services' HTTP/1.1 server (see http_server.hpp): one I/O thread runs every read and
// write (Beast's async operations with timeouts); handlers run on threads of their own and post
// their answer back to it.
#include "libcommon/http_server.hpp"

#include <fcntl.h>
#include <sys/socket.h>

#include <utility>  // before boost: asio's awaitable.hpp uses std::exchange without it (seen without the PCH)

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/log.hpp"

namespace ca::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = boost::asio::ip::tcp;

bool bearer_matches(const std::string& authorization, const std::string& secret) {
  if (secret.empty()) return true;
  static const std::string kScheme = "Bearer ";
  std::string token;
  if (authorization.size() > kScheme.size()) {
    bool scheme = true;  // the scheme is case-insensitive (RFC 7235)
    for (std::size_t i = 0; i < kScheme.size(); ++i)
      scheme = scheme && std::tolower(static_cast<unsigned char>(authorization[i])) ==
                             std::tolower(static_cast<unsigned char>(kScheme[i]));
    if (scheme) token = authorization.substr(kScheme.size());
  }
  // Digests of equal length: CRYPTO_memcmp's time depends on neither the secret nor the token.
  unsigned char a[EVP_MAX_MD_SIZE], b[EVP_MAX_MD_SIZE];
  unsigned int na = 0, nb = 0;
  if (EVP_Digest(token.data(), token.size(), a, &na, EVP_sha256(), nullptr) != 1 ||
      EVP_Digest(secret.data(), secret.size(), b, &nb, EVP_sha256(), nullptr) != 1 || na != nb)
    return false;
  return CRYPTO_memcmp(a, b, na) == 0 && !token.empty();
}

namespace {

std::chrono::milliseconds ms(double seconds) { return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)); }

Response error_response(int status, const std::string& message, int exit_code) {
  Response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = Json{{"error", message}, {"exit_code", exit_code}}.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  return r;
}

// The handler's answer, or the error response its exception maps to.
Response run_handler(const Handler& handler, const Request& request) {
  try {
    return handler(request);
  } catch (const UsageError& e) {
    return error_response(400, e.what(), e.exit_code);
  } catch (const InputError& e) {
    return error_response(400, e.what(), e.exit_code);
  } catch (const EnvironmentError& e) {
    return error_response(503, e.what(), e.exit_code);
  } catch (const Error& e) {
    return error_response(500, e.what(), e.exit_code);
  } catch (const std::exception& e) {
    return error_response(500, std::string("internal error: ") + e.what(), kExitInternal);
  }
}

struct Route {
  Handler handler;
  bool work = true;
  bool open = false;
};

bool out_of_descriptors(const beast::error_code& ec) {
  return ec == asio::error::no_descriptors || ec.value() == ENFILE || ec == asio::error::no_buffer_space ||
         ec == asio::error::no_memory;
}

}  // namespace

class Session;

struct Server::Impl {
  ServerOptions options;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_backoff{io};
  std::map<std::string, std::map<std::string, Route>> routes;  // path -> method -> route
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> queued{0}, served{0};
  std::set<std::shared_ptr<Session>> sessions;  // the I/O thread's only
  bool accepting = false;                       // an async_accept (or its backoff) is pending
  bool accept_failing = false;                  // logged once until an accept succeeds again
  bool accept_warned = false;                   // ... and at most once a minute
  std::chrono::steady_clock::time_point last_accept_warning;
  // Admission (the I/O thread's only): work handlers running, and those waiting their turn.
  int running = 0;
  std::deque<std::shared_ptr<Session>> waiting;
  std::size_t buffered_bytes = 0;  // request bodies reserved by sessions
  std::mutex mu;
  std::condition_variable cv;
  int handlers_running = 0;

  void accept();
  void maybe_accept();
  void close_idle();
  void admit_next();
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Server::Impl& server, tcp::socket socket) : server_(server), stream_(std::move(socket)) {}

  void read() {
    parser_.emplace();
    chunked_ = false;
    parser_->body_limit(server_.options.max_body_bytes);
    stream_.expires_after(ms(server_.options.read_timeout_s));
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  bool busy() const { return busy_; }

  void close() {
    release_budget();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    if (server_.sessions.erase(shared_from_this())) server_.maybe_accept();
  }

  // Admitted: the handler runs on a thread of its own; its answer is posted back.
  void start_handler() {
    Server::Impl& server = server_;
    if (route_.work) ++server.running;
    {
      std::lock_guard<std::mutex> lock(server.mu);
      ++server.handlers_running;
    }
    auto guard = asio::make_work_guard(server.io);
    std::thread([self = shared_from_this(), handler = route_.handler, work = route_.work, request = std::move(request_),
                 guard = std::move(guard)]() mutable {
      Response response = run_handler(handler, request);
      Server::Impl& server = self->server_;
      asio::post(server.io, [self, work, response = std::move(response)]() mutable {
        if (work) {
          --self->server_.queued;
          ++self->server_.served;
          --self->server_.running;
        }
        self->server_.admit_next();
        self->finish_work(std::move(response));
      });
      {
        std::lock_guard<std::mutex> lock(server.mu);
        --server.handlers_running;
      }
      server.cv.notify_all();
    }).detach();
  }

  // The client left while its request waited: it never runs.
  bool cancelled() const { return cancelled_->load(); }

  // The service stops while this request waits for its turn: it is not run (an environment error:
  // the client sends it again, elsewhere).
  void answer_stopping() {
    --server_.queued;
    stop_watching();
    write(error_response(503, "the service is stopping: this request was not run; send it again", kExitEnvironment), false);
  }

 private:
  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    auto& req = parser_->get();
    keep_alive_ = req.keep_alive();
    version_ = req.version();
    const std::string target(req.target());
    const std::string method(req.method_string());
    const std::string path = target.substr(0, target.find('?'));
    authenticated_ = bearer_matches(std::string(req[bhttp::field::authorization]), server_.options.secret);
    auto it = server_.routes.find(path);
    const Route* route = nullptr;
    if (it != server_.routes.end())
      if (auto r = it->second.find(method); r != it->second.end()) route = &r->second;
    // Without the secret nothing is told, not even which paths exist; the body is never read.
    if (!authenticated_ && !(route && route->open)) {
      Response r = error_response(401, "this service needs its shared secret: Authorization: Bearer <secret>", kExitUsage);
      return reject(std::move(r), true);
    }
    if (it == server_.routes.end()) return reject(error_response(404, "no such endpoint: " + path, kExitUsage));
    if (!route) {
      std::string allowed;
      for (const auto& [m, r] : it->second) allowed += (allowed.empty() ? "" : ", ") + m;
      return reject(error_response(405, method + " " + path + ": use " + allowed, kExitUsage));
    }
    if (server_.stopping) return reject(error_response(503, "the service is stopping", kExitEnvironment));
    // The body's memory is reserved before it is read: its length, or the limit when it is chunked.
    // A request with neither Content-Length nor chunked Transfer-Encoding has no body (RFC 9112 6.3)
    // and reserves nothing: a health check (GET) held 256 MiB of the budget, so a few at once made
    // the service answer 503 "busy" to everyone.
    std::size_t want = 0;
    if (auto n = parser_->content_length()) {
      if (*n > server_.options.max_body_bytes)
        return reject(error_response(413, log::cat("request body over ", server_.options.max_body_bytes, " bytes"), kExitBadInput));
      want = static_cast<std::size_t>(*n);
    } else if (parser_->chunked()) {
      // Unknown length: counted as it arrives (read_body), so slow clients hold only what they sent.
      chunked_ = true;
      want = std::min(kChunkedStep, server_.options.max_body_bytes);
    }
    if (server_.buffered_bytes + want > server_.options.max_buffered_bytes)
      return reject(error_response(503, log::cat("busy: ", server_.buffered_bytes, " bytes of requests held; try again later"),
                                   kExitEnvironment));
    reserved_ = want;
    server_.buffered_bytes += want;
    route_ = *route;
    request_.method = method;
    request_.target = target;
    request_.authenticated = authenticated_;
    // curl and libcurl send `Expect: 100-continue` before bodies over 1 MiB and wait for it.
    if (beast::iequals(req[bhttp::field::expect], "100-continue")) {
      auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, version_);
      bhttp::async_write(stream_, *cont, [self = shared_from_this(), cont](beast::error_code ec, std::size_t) {
        if (ec) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    if (!chunked_) {
      bhttp::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_body(ec); });
      return;
    }
    bhttp::async_read_some(stream_, buffer_, *parser_,
                           [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_body_some(ec); });
  }

  // A chunked body, piece by piece: the budget grows with what arrived (in steps), so the bodies of
  // slow clients hold only what they sent, never the whole limit each (four at once held the 1 GiB).
  void on_body_some(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    const std::size_t have = parser_->get().body().capacity();  // what it holds, growth included
    if (have > reserved_) {
      const std::size_t more = std::max(have - reserved_, kChunkedStep);
      if (server_.buffered_bytes + more > server_.options.max_buffered_bytes)
        return reject(error_response(503, log::cat("busy: ", server_.buffered_bytes, " bytes of requests held; try again later"),
                                     kExitEnvironment));
      server_.buffered_bytes += more;
      reserved_ += more;
    }
    if (parser_->is_done()) return on_body({});
    read_body();
  }

  void on_read_error(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {
      busy_ = true;
      release_budget();
      write(error_response(413, log::cat("request body over ", server_.options.max_body_bytes, " bytes"), kExitBadInput), false);
      return;
    }
    // end of stream, a timeout, a stop, a malformed request head
    if (ec != bhttp::error::end_of_stream && ec != asio::error::operation_aborted && ec != beast::error::timeout &&
        ec != asio::error::eof && ec != asio::error::connection_reset && !server_.stopping)
      log::verbose("http: dropped a connection: ", ec.message());
    close();
  }

  // An answer before the body was read: the connection cannot be reused.
  void reject(Response r, bool unauthorized = false) {
    busy_ = true;
    unauthorized_ = unauthorized;
    write(std::move(r), false);
  }

  void on_body(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    busy_ = true;
    stream_.expires_never();
    request_.body = std::move(parser_->get().body());
    request_.cancelled = cancelled_;
    if (!route_.work) return start_handler();
    ++server_.queued;
    watch_for_close();
    const int max_running = server_.options.max_running;
    if (max_running <= 0 || (server_.running < max_running && server_.waiting.empty())) return start_handler();
    if (static_cast<int>(server_.waiting.size()) >= server_.options.max_waiting) {
      --server_.queued;
      stop_watching();
      return write(error_response(503, log::cat("busy: ", server_.running, " requests running and ", server_.waiting.size(),
                                                " waiting; try again later"),
                                  kExitEnvironment),
                   false);
    }
    server_.waiting.push_back(shared_from_this());
  }

  // While a request waits or runs nothing is read from its connection: a readable socket then is
  // its client closing (or pipelining the next request, which is left for later).
  void watch_for_close() {
    const uint64_t generation = ++generation_;
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), generation](beast::error_code ec) {
      if (ec || generation != self->generation_ || !self->busy_) return;
      char byte;
      ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) return;  // more data: not a close
      self->on_client_gone();
    });
  }
  void stop_watching() {
    ++generation_;
    beast::error_code ec;
    stream_.socket().cancel(ec);
  }

  void on_client_gone() {
    cancelled_->store(true);
    auto& w = server_.waiting;
    for (auto it = w.begin(); it != w.end(); ++it) {
      if (it->get() != this) continue;
      w.erase(it);
      --server_.queued;
      log::verbose("http: a client left before its request ran: dropped");
      close();
      return;
    }
    log::verbose("http: a client left while its request ran: cancelled");
  }

  void finish_work(Response response) {
    stop_watching();
    if (cancelled()) return close();
    write(std::move(response), keep_alive_);
  }

  void release_budget() {
    server_.buffered_bytes -= reserved_;
    reserved_ = 0;
  }

  void write(Response r, bool keep_alive) {
    release_budget();
    const bool keep = keep_alive && !server_.stopping;
    response_ = {};
    response_.version(version_);
    response_.result(static_cast<unsigned>(r.status));
    response_.set(bhttp::field::server, "cuda-agent");
    response_.set(bhttp::field::content_type, r.content_type);
    if (unauthorized_) response_.set(bhttp::field::www_authenticate, "Bearer");
    if (r.status == 503) response_.set(bhttp::field::retry_after, "5");
    response_.body() = std::move(r.body);
    response_.keep_alive(keep);
    response_.prepare_payload();
    stream_.expires_after(ms(server_.options.write_timeout_s));
    bhttp::async_write(stream_, response_, [self = shared_from_this(), keep](beast::error_code ec, std::size_t) {
      self->busy_ = false;
      self->unauthorized_ = false;
      self->request_ = Request{};
      self->cancelled_ = std::make_shared<std::atomic<bool>>(false);
      if (ec || !keep || self->server_.stopping) return self->close();
      self->read();
    });
  }

  Server::Impl& server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::response<bhttp::string_body> response_;
  Route route_;
  Request request_;
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
  uint64_t generation_ = 0;
  std::size_t reserved_ = 0;
  bool chunked_ = false;                                       // this request's body is chunked
  static constexpr std::size_t kChunkedStep = std::size_t(1) << 20;  // its budget grows by at least this
  bool keep_alive_ = false, authenticated_ = false, unauthorized_ = false;
  unsigned version_ = 11;
  bool busy_ = false;
};

void Server::Impl::admit_next() {
  const int max_running = options.max_running;
  while (!waiting.empty() && (max_running <= 0 || running < max_running)) {
    auto s = waiting.front();
    waiting.pop_front();
    if (s->cancelled()) continue;
    s->start_handler();
  }
}

void Server::Impl::maybe_accept() {
  if (!accepting && !stopping && static_cast<int>(sessions.size()) < options.max_connections) accept();
}

void Server::Impl::accept() {
  accepting = true;
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    accepting = false;
    if (stopping || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of file descriptors (EMFILE) the pending connection stays in the backlog and accept()
      // would fail again at once: pause instead of spinning, and say so once.
      const bool fds = out_of_descriptors(ec);
      // Said once per minute at most: near the limit, descriptors freed and taken again make
      // accept fail, succeed and fail again, and each round would say it anew.
      const auto now = std::chrono::steady_clock::now();
      if (!accept_failing && (!accept_warned || now - last_accept_warning > std::chrono::seconds(60))) {
        log::warn("http: accept: ", ec.message(), fds ? ": pausing new connections until descriptors free up" : "");
        accept_warned = true;
        last_accept_warning = now;
      }
      accept_failing = true;
      accepting = true;
      accept_backoff.expires_after(std::chrono::milliseconds(fds ? 500 : 100));
      accept_backoff.async_wait([this](beast::error_code) {
        accepting = false;
        maybe_accept();
      });
      return;
    }
    if (accept_failing) log::info("http: accepting connections again");
    accept_failing = false;
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
    auto session = std::make_shared<Session>(*this, std::move(socket));
    sessions.insert(session);
    session->read();
    maybe_accept();
  });
}

void Server::Impl::close_idle() {
  auto copy = sessions;
  for (const auto& s : copy)
    if (!s->busy()) s->close();
}

Server::Server(const ServerOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  std::string a = options.address;
  // PORT and :PORT mean loopback: a service is reachable from other machines only when asked.
  if (!a.empty() && a.find_first_not_of("0123456789") == std::string::npos) a = ":" + a;
  auto colon = a.rfind(':');
  if (colon == std::string::npos || colon + 1 == a.size())
    throw UsageError("--serve: expected HOST:PORT, :PORT or PORT (for example 127.0.0.1:0, port 0 picks a free one), got '" +
                     options.address + "'");
  std::string host = a.substr(0, colon), port = a.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "127.0.0.1";
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) > 65535)
    throw UsageError("--serve: port '" + port + "' is not a number from 0 to 65535");
  beast::error_code ec;
  tcp::resolver resolver(impl_->io);
  auto endpoints = resolver.resolve(host, port, tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) throw EnvironmentError("--serve: cannot resolve '" + host + "': " + ec.message());
  tcp::endpoint endpoint = endpoints.begin()->endpoint();
  // Decided on the address that will really be bound, so no spelling (0, ::, a name) gets around it.
  if (!endpoint.address().is_loopback()) {
    if (!options.allow_public)
      throw UsageError("--serve " + options.address + ": " + endpoint.address().to_string() +
                       " is reachable from other machines; a service is private unless made public on purpose: add "
                       "--public and a shared secret (--secret-file FILE or CA_JUDGE_SECRET), or serve on 127.0.0.1");
    if (options.secret.empty())
      throw UsageError("--public needs a shared secret (--secret-file FILE or CA_JUDGE_SECRET): every request must carry it");
  }
  auto& acc = impl_->acceptor;
  acc.open(endpoint.protocol(), ec);
  if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(endpoint, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw EnvironmentError("--serve: cannot listen on " + a + ": " + ec.message());
  // A child (the reference worker, the runner) must not inherit the listening socket.
  ::fcntl(acc.native_handle(), F_SETFD, FD_CLOEXEC);
}

Server::~Server() {
  stop();
}

std::string Server::bound_address() const {
  auto ep = impl_->acceptor.local_endpoint();
  std::string host = ep.address().to_string();
  if (ep.address().is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(ep.port());
}

void Server::route(const std::string& method, const std::string& path, Handler handler, bool work, bool open) {
  impl_->routes[path][method] = Route{std::move(handler), work, open};
}

void Server::serve() {
  impl_->maybe_accept();
  impl_->io.run();  // returns once stopped: acceptor closed, sessions closed, no handler left
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->cv.wait(lock, [&] { return impl_->handlers_running == 0; });
}

void Server::stop() {
  if (impl_->stopping.exchange(true)) return;
  asio::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor.close(ec);
    impl->accept_backoff.cancel();
    // Requests still waiting for admission are answered now: they will not run.
    while (!impl->waiting.empty()) {
      auto s = impl->waiting.front();
      impl->waiting.pop_front();
      if (!s->cancelled()) s->answer_stopping();
    }
    impl->close_idle();
  });
}

int64_t Server::queued() const { return impl_->queued.load(); }
int64_t Server::served() const { return impl_->served.load(); }

}  // namespace ca::http
