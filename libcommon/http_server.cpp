// The judge services' HTTP/1.1 server (see http_server.hpp): one I/O thread runs every read and
// write (Beast's async operations with timeouts); handlers run on threads of their own and post
// their answer back to it.
#include "libcommon/http_server.hpp"

#include <fcntl.h>

#include <utility>  // before boost: asio's awaitable.hpp uses std::exchange without it (seen without the PCH)

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/log.hpp"

namespace ca::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = boost::asio::ip::tcp;

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
};

}  // namespace

class Session;

struct Server::Impl {
  ServerOptions options;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::map<std::string, std::map<std::string, Route>> routes;  // path -> method -> route
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> queued{0}, served{0};
  std::set<std::shared_ptr<Session>> sessions;  // the I/O thread's only
  std::mutex mu;
  std::condition_variable cv;
  int handlers_running = 0;

  void accept();
  void close_idle();
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Server::Impl& server, tcp::socket socket) : server_(server), stream_(std::move(socket)) {}

  void read() {
    parser_.emplace();
    parser_->body_limit(server_.options.max_body_bytes);
    stream_.expires_after(ms(server_.options.read_timeout_s));
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  bool busy() const { return busy_; }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    server_.sessions.erase(shared_from_this());
  }

 private:
  void on_read(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {
      busy_ = true;
      write(error_response(413, log::cat("request body over ", server_.options.max_body_bytes, " bytes"), kExitBadInput), false,
            11);
      return;
    }
    if (ec) {  // end of stream, a timeout, a stop, a malformed request head
      if (ec != bhttp::error::end_of_stream && ec != asio::error::operation_aborted && ec != beast::error::timeout &&
          ec != asio::error::eof && ec != asio::error::connection_reset && !server_.stopping)
        log::verbose("http: dropped a connection: ", ec.message());
      close();
      return;
    }
    bhttp::request<bhttp::string_body> req = parser_->release();
    const bool keep_alive = req.keep_alive();
    const unsigned version = req.version();
    busy_ = true;
    stream_.expires_never();
    Request request;
    request.method = std::string(req.method_string());
    request.target = std::string(req.target());
    request.body = std::move(req.body());
    std::string path = request.target.substr(0, request.target.find('?'));
    auto it = server_.routes.find(path);
    if (it == server_.routes.end()) {
      write(error_response(404, "no such endpoint: " + path, kExitUsage), keep_alive, version);
      return;
    }
    auto route = it->second.find(request.method);
    if (route == it->second.end()) {
      std::string allowed;
      for (const auto& [m, r] : it->second) allowed += (allowed.empty() ? "" : ", ") + m;
      write(error_response(405, request.method + " " + path + ": use " + allowed, kExitUsage), keep_alive, version);
      return;
    }
    if (server_.stopping) {
      write(error_response(503, "the service is stopping", kExitEnvironment), false, version);
      return;
    }
    const Route& r = route->second;
    if (r.work) ++server_.queued;
    {
      std::lock_guard<std::mutex> lock(server_.mu);
      ++server_.handlers_running;
    }
    // The handler may take minutes (a profile): it runs on a thread of its own; the work guard
    // keeps the I/O thread running until its answer is posted back.
    auto guard = asio::make_work_guard(server_.io);
    std::thread([self = shared_from_this(), handler = r.handler, work = r.work, request = std::move(request), keep_alive,
                 version, guard = std::move(guard)]() mutable {
      Response response = run_handler(handler, request);
      Server::Impl& server = self->server_;
      if (work) {
        --server.queued;
        ++server.served;
      }
      asio::post(server.io, [self, response = std::move(response), keep_alive, version]() mutable {
        self->write(std::move(response), keep_alive, version);
      });
      {
        std::lock_guard<std::mutex> lock(server.mu);
        --server.handlers_running;
      }
      server.cv.notify_all();
    }).detach();
  }

  void write(Response r, bool keep_alive, unsigned version) {
    const bool keep = keep_alive && !server_.stopping;
    response_ = {};
    response_.version(version);
    response_.result(static_cast<unsigned>(r.status));
    response_.set(bhttp::field::server, "cuda-agent");
    response_.set(bhttp::field::content_type, r.content_type);
    response_.body() = std::move(r.body);
    response_.keep_alive(keep);
    response_.prepare_payload();
    stream_.expires_after(ms(server_.options.write_timeout_s));
    bhttp::async_write(stream_, response_, [self = shared_from_this(), keep](beast::error_code ec, std::size_t) {
      self->busy_ = false;
      if (ec || !keep || self->server_.stopping) return self->close();
      self->read();
    });
  }

  Server::Impl& server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::response<bhttp::string_body> response_;
  bool busy_ = false;
};

void Server::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (!stopping && ec != asio::error::operation_aborted) {
        log::warn("http: accept: ", ec.message());
        accept();
      }
      return;
    }
    if (stopping) return;
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto session = std::make_shared<Session>(*this, std::move(socket));
    sessions.insert(session);
    session->read();
    accept();
  });
}

void Server::Impl::close_idle() {
  auto copy = sessions;
  for (const auto& s : copy)
    if (!s->busy()) s->close();
}

Server::Server(const ServerOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  const std::string& a = options.address;
  auto colon = a.rfind(':');
  if (colon == std::string::npos || colon + 1 == a.size())
    throw UsageError("--serve: expected HOST:PORT (for example 127.0.0.1:0, port 0 picks a free one), got '" + a + "'");
  std::string host = a.substr(0, colon), port = a.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) > 65535)
    throw UsageError("--serve: port '" + port + "' is not a number from 0 to 65535");
  beast::error_code ec;
  tcp::resolver resolver(impl_->io);
  auto endpoints = resolver.resolve(host, port, tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) throw EnvironmentError("--serve: cannot resolve '" + host + "': " + ec.message());
  tcp::endpoint endpoint = endpoints.begin()->endpoint();
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

void Server::route(const std::string& method, const std::string& path, Handler handler, bool work) {
  impl_->routes[path][method] = Route{std::move(handler), work};
}

void Server::serve() {
  impl_->accept();
  impl_->io.run();  // returns once stopped: acceptor closed, sessions closed, no handler left
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->cv.wait(lock, [&] { return impl_->handlers_running == 0; });
}

void Server::stop() {
  if (impl_->stopping.exchange(true)) return;
  asio::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor.close(ec);
    impl->close_idle();
  });
}

int64_t Server::queued() const { return impl_->queued.load(); }
int64_t Server::served() const { return impl_->served.load(); }

}  // namespace ca::http
