//! An HTTP server behind API Priority and Fairness, on Kubernetes' built-in
//! configuration: hyper 1 + tokio, with `apf::tower::ApfLayer` in front of a
//! handler that pretends to work for a while.
//!
//! Who is asking comes from headers, as behind an authenticating proxy:
//! `X-Remote-User` (default `system:anonymous`) and `X-Remote-Group` (comma
//! separated, repeatable). What is asked comes from the method and a
//! Kubernetes-shaped path (`/api/v1/namespaces/NS/RESOURCE/NAME`,
//! `/apis/GROUP/VERSION/...`); any other path is a non-resource request.
//! `?work_ms=N` sets how long the handler works (default 20 ms), and
//! `GET /debug/levels` prints every level's seats, queue and counters.
//!
//! ```text
//! cargo run --features tower --example apf_server -- [ADDR] [SERVER_CONCURRENCY_LIMIT]
//! curl -si -H 'X-Remote-User: alice' -H 'X-Remote-Group: dev' \
//!     localhost:8080/api/v1/namespaces/default/pods
//! curl -s localhost:8080/debug/levels
//! ```
//!
//! Flood it (e.g. `hey -c 500 -n 20000 -H 'X-Remote-User: noisy' URL`)
//! while another user keeps getting answers: the flood gets `429` with a
//! `Retry-After` that grows, the others keep their share.

use apf::classification::OwnedDigest;
use apf::classification::RequestInfo;
use apf::clock::Clock;
use apf::dispatcher::{Dispatcher, DispatcherOptions};
use apf::queueset::RejectReason;
use apf::tower::ApfLayer;
use apf::work_estimate::WorkEstimate;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower_layer::Layer;
use tower_service::Service;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args.next().as_deref().unwrap_or("127.0.0.1:8080").parse()?;
    let limit: u32 = match args.next() {
        Some(n) => n.parse()?,
        None => DispatcherOptions::default().server_concurrency_limit,
    };
    let options = DispatcherOptions {
        server_concurrency_limit: limit,
        ..DispatcherOptions::default()
    };
    let dispatcher = Arc::new(Dispatcher::builtin(options, Clock::real()));
    let layer = ApfLayer::new(dispatcher.clone(), classify);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!(
        "listening on http://{} (server concurrency limit {limit})",
        listener.local_addr()?
    );
    loop {
        let (stream, _) = listener.accept().await?;
        let service = TowerToHyperService::new(layer.layer(Handler {
            dispatcher: dispatcher.clone(),
        }));
        tokio::spawn(async move {
            // A client that hangs up mid-request is not an error worth a line.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The request's user, groups, verb and target, as Kubernetes' request-info
/// and authentication filters would give them (the user and groups from
/// the `X-Remote-User` / `X-Remote-Group` headers of an authenticating
/// proxy).
fn classify<B>(request: &Request<B>) -> (OwnedDigest, WorkEstimate) {
    let headers = request.headers();
    let user = headers
        .get("x-remote-user")
        .and_then(|v| v.to_str().ok())
        .filter(|u| !u.is_empty());
    let mut groups: Vec<String> = headers
        .get_all("x-remote-group")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_owned)
        .collect();
    groups.push(
        if user.is_some() {
            "system:authenticated"
        } else {
            "system:unauthenticated"
        }
        .to_owned(),
    );
    // The verb and, for a resource path, the group, namespace, resource,
    // name and subresource, as Kubernetes' request-info filter derives them
    // (the query says whether a list is a watch).
    let query = request.uri().query().unwrap_or("");
    let info = RequestInfo::parse(request.method().as_str(), request.uri().path(), query);
    let user = user.unwrap_or("system:anonymous").to_owned();
    let digest = OwnedDigest::from_info(&info, user, groups);
    (digest, WorkEstimate::new(1, 0, Duration::ZERO))
}

/// The work behind the layer: wait `work_ms`, then answer; or print the
/// levels for `/debug/levels`.
#[derive(Clone)]
struct Handler {
    dispatcher: Arc<Dispatcher>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl Service<Request<Incoming>> for Handler {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        if request.uri().path() == "/debug/levels" {
            let text = levels_report(&self.dispatcher);
            return Box::pin(async move { Ok(Response::new(Full::from(text))) });
        }
        let work_ms = request
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("work_ms=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(20);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(work_ms)).await;
            Ok(Response::new(Full::from("ok\n")))
        })
    }
}

fn levels_report(dispatcher: &Dispatcher) -> String {
    let mut out = format!(
        "{:<16} {:>6} {:>6} {:>9} {:>8} {:>10} {:>10}\n",
        "level", "limit", "seats", "executing", "waiting", "dispatched", "rejected"
    );
    for level in dispatcher.levels() {
        let s = level.stats().queueset;
        let rejected: u64 = RejectReason::ALL.iter().map(|&r| level.rejected(r)).sum();
        let limit = if level.is_exempt() {
            "-".to_owned()
        } else {
            s.concurrency_limit.to_string()
        };
        let _ = writeln!(
            out,
            "{:<16} {:>6} {:>6} {:>9} {:>8} {:>10} {:>10}",
            level.name,
            limit,
            s.seats_in_use,
            s.requests_executing,
            s.requests_waiting,
            level.dispatched(),
            rejected
        );
    }
    out
}
