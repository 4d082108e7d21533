//! The tower layer in a real HTTP server on loopback (hyper 1, tokio, the
//! real clock): a flood from one abusive client against polite ones, and a
//! client that hangs up while queued. Bounded in requests and guarded by a
//! timeout; no sleeps for synchronisation (barriers and channels), and no
//! assertion on timing.
//!
//! `cargo test --features tower --test end_to_end tower_load::`
#![cfg(feature = "tower")]

use apf::classification::OwnedDigest;
use apf::clock::Clock;
use apf::config::{Config, QueuingConfiguration};
use apf::dispatcher::{Dispatcher, DispatcherOptions};
use apf::queueset::RejectReason;
use apf::tower::ApfLayer;
use apf::work_estimate::WorkEstimate;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Barrier};
use tower_layer::Layer;
use tower_service::Service;

/// Seats of the whole server: global-default, where every client here
/// lands, gets 2 of them.
const SERVER_CONCURRENCY_LIMIT: u32 = 24;
/// How long a served request works.
const WORK: Duration = Duration::from_millis(2);
/// Guards against a hang; the flood test takes about a second.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

const LEVEL: &str = "global-default";

/// The built-in configuration, with global-default's queues made smaller
/// (64 queues, hands of 4, 8 requests a queue) so that a flood of a few
/// dozen connections overflows them: the flood's hand holds at most 32
/// waiting requests besides the 2 executing.
fn config() -> Config {
    let mut config = Config::builtin();
    let level = config
        .priority_levels
        .iter_mut()
        .find(|pl| pl.metadata.name == LEVEL)
        .expect("built in");
    let limited = level.spec.limited.as_mut().expect("limited");
    limited.limit_response.queuing = Some(QueuingConfiguration {
        queues: 64,
        hand_size: 4,
        queue_length_limit: 8,
    });
    config
}

fn dispatcher() -> Arc<Dispatcher> {
    let options = DispatcherOptions {
        server_concurrency_limit: SERVER_CONCURRENCY_LIMIT,
        // No lending during the test: global-default stays at its 2 seats.
        borrowing_period: Duration::from_secs(3600),
        ..DispatcherOptions::default()
    };
    Arc::new(Dispatcher::new(&config(), options, Clock::real()).expect("valid config"))
}

// ----- the server ------------------------------------------------------------

/// The user of every classified request is reported here (for the test
/// that must know its request reached the layer).
type Classified = mpsc::UnboundedSender<String>;

/// The handler: `/work` works for [`WORK`]; `/hold` reports that it started
/// and answers once `release` turns true.
#[derive(Clone)]
struct Handler {
    started: mpsc::UnboundedSender<()>,
    release: watch::Receiver<bool>,
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
        let hold = request.uri().path() == "/hold";
        let started = self.started.clone();
        let mut release = self.release.clone();
        Box::pin(async move {
            if hold {
                let _ = started.send(());
                let _ = release.wait_for(|r| *r).await;
            } else {
                tokio::time::sleep(WORK).await;
            }
            Ok(Response::new(Full::from("ok\n")))
        })
    }
}

struct Server {
    addr: SocketAddr,
    /// One message per connection the server has finished with (its
    /// request futures dropped).
    closed: mpsc::UnboundedReceiver<()>,
    classified: mpsc::UnboundedReceiver<String>,
    started: mpsc::UnboundedReceiver<()>,
    release: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn start_server(dispatcher: Arc<Dispatcher>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound");
    let (classified_tx, classified) = mpsc::unbounded_channel();
    let (closed_tx, closed) = mpsc::unbounded_channel();
    let (started_tx, started) = mpsc::unbounded_channel();
    let (release, release_rx) = watch::channel(false);
    let layer = ApfLayer::new(dispatcher, move |r: &Request<Incoming>| {
        classify(r, &classified_tx)
    });
    let handler = Handler {
        started: started_tx,
        release: release_rx,
    };
    let accept = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = TowerToHyperService::new(layer.layer(handler.clone()));
            let closed = closed_tx.clone();
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                let _ = closed.send(());
            });
        }
    });
    Server {
        addr,
        closed,
        classified,
        started,
        release,
        accept,
    }
}

/// A non-resource request from the `X-Remote-User`, authenticated.
fn classify<B>(request: &Request<B>, classified: &Classified) -> (OwnedDigest, WorkEstimate) {
    let user = request
        .headers()
        .get("x-remote-user")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("system:anonymous")
        .to_owned();
    // The flood test drops the receiver: nobody listens then.
    let _ = classified.send(user.clone());
    let digest = OwnedDigest {
        user,
        groups: vec!["system:authenticated".to_owned()],
        verb: request.method().as_str().to_ascii_lowercase(),
        path: request.uri().path().to_owned(),
        ..OwnedDigest::default()
    };
    (digest, WorkEstimate::new(1, 0, Duration::ZERO))
}

// ----- clients ---------------------------------------------------------------

/// One keep-alive HTTP/1 connection.
struct Client {
    sender: SendRequest<Empty<Bytes>>,
    user: String,
}

impl Client {
    async fn connect(addr: SocketAddr, user: &str) -> Client {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(connection);
        Client {
            sender,
            user: user.to_owned(),
        }
    }

    async fn get(&mut self, path: &str) -> Result<Answer, hyper::Error> {
        self.sender.ready().await?;
        let request = Request::get(path)
            .header("host", "apf.test")
            .header("x-remote-user", &self.user)
            .body(Empty::new())
            .expect("valid request");
        let response = self.sender.send_request(request).await?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let answer = Answer {
            status: response.status(),
            retry_after: header("retry-after"),
            level: header("x-kubernetes-pf-prioritylevel-uid"),
            schema: header("x-kubernetes-pf-flowschema-uid"),
        };
        response.into_body().collect().await?;
        Ok(answer)
    }
}

struct Answer {
    status: StatusCode,
    retry_after: Option<String>,
    level: Option<String>,
    schema: Option<String>,
}

/// What one side of the test sent and got back.
#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    ok: AtomicU64,
    too_many: AtomicU64,
    /// Anything else: another status, a transport error (a lost request),
    /// a 429 without Retry-After, a response without the PF headers.
    wrong: AtomicU64,
}

impl Tally {
    fn note(&self, result: Result<Answer, hyper::Error>) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let counter = match result {
            Ok(a) if !a.has_pf_headers() => &self.wrong,
            Ok(a) if a.status == StatusCode::OK => &self.ok,
            Ok(a) if a.status == StatusCode::TOO_MANY_REQUESTS && a.retry_after_is_valid() => {
                &self.too_many
            }
            _ => &self.wrong,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> (u64, u64, u64, u64) {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (
            load(&self.sent),
            load(&self.ok),
            load(&self.too_many),
            load(&self.wrong),
        )
    }
}

impl Answer {
    fn has_pf_headers(&self) -> bool {
        // The built-in objects have no metadata.uid: they have derived UIDs.
        self.level.as_deref() == Some(apf::uid::priority_level_uid(LEVEL).as_str())
            && self.schema.as_deref() == Some(apf::uid::flow_schema_uid(LEVEL).as_str())
    }

    fn retry_after_is_valid(&self) -> bool {
        self.retry_after
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|s| (1..=32).contains(&s))
    }
}

// ----- the tests -------------------------------------------------------------

const ABUSIVE_CONNECTIONS: usize = 48;
/// Each abusive connection stops here at the latest.
const ABUSIVE_CAP: u64 = 150;
const POLITE_CLIENTS: usize = 8;
const POLITE_REQUESTS: u64 = 25;

/// One user floods from many connections, ignoring `Retry-After`, while
/// polite users each send one request at a time. The flood overflows its
/// queues and gets 429s; the polite users keep their fair share and are
/// served; afterwards every seat and queue is empty and the dispatcher's
/// counters account for every request sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_gets_429s_while_polite_clients_are_served_and_nothing_leaks() {
    let dispatcher = dispatcher();
    let mut server = start_server(dispatcher.clone()).await;
    server.classified.close();
    let addr = server.addr;
    let abusive = Arc::new(Tally::default());
    let polite = Arc::new(Tally::default());
    let run = async {
        let barrier = Arc::new(Barrier::new(ABUSIVE_CONNECTIONS + POLITE_CLIENTS));
        let stop = Arc::new(AtomicBool::new(false));
        let mut flood = Vec::new();
        for _ in 0..ABUSIVE_CONNECTIONS {
            let (barrier, stop, tally) = (barrier.clone(), stop.clone(), abusive.clone());
            flood.push(tokio::spawn(async move {
                let mut client = Client::connect(addr, "abuser").await;
                barrier.wait().await;
                for _ in 0..ABUSIVE_CAP {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    tally.note(client.get("/work").await);
                }
            }));
        }
        let mut users = Vec::new();
        for i in 0..POLITE_CLIENTS {
            let (barrier, tally) = (barrier.clone(), polite.clone());
            users.push(tokio::spawn(async move {
                let mut client = Client::connect(addr, &format!("polite-{i}")).await;
                barrier.wait().await;
                for _ in 0..POLITE_REQUESTS {
                    tally.note(client.get("/work").await);
                }
            }));
        }
        for task in users {
            task.await.expect("polite client");
        }
        stop.store(true, Ordering::Relaxed);
        for task in flood {
            task.await.expect("abusive client");
        }
        // Still standing: a newcomer is served.
        let mut late = Client::connect(addr, "late").await;
        polite.note(late.get("/work").await);
    };
    tokio::time::timeout(TEST_TIMEOUT, run)
        .await
        .expect("the load test finishes");

    let (a_sent, a_ok, a_429, a_wrong) = abusive.get();
    let (p_sent, p_ok, p_429, p_wrong) = polite.get();
    println!("abusive: {a_sent} sent, {a_ok} served, {a_429} rejected");
    println!("polite:  {p_sent} sent, {p_ok} served, {p_429} rejected");
    assert_eq!(
        (a_wrong, p_wrong),
        (0, 0),
        "every request answered 200 or 429"
    );
    assert_eq!(p_sent, POLITE_CLIENTS as u64 * POLITE_REQUESTS + 1);
    assert!(
        p_ok * 100 >= p_sent * 95,
        "polite clients served: {p_ok} of {p_sent}"
    );
    assert!(a_429 > 0, "the flood overflowed its queues and got 429s");
    assert!(a_ok > 0, "the flood still got its share");

    let (mut dispatched, mut rejected) = (0, 0);
    for level in dispatcher.levels() {
        let s = level.stats().queueset;
        assert_eq!(
            (s.seats_in_use, s.requests_executing, s.requests_waiting),
            (0, 0, 0),
            "nothing left at {}",
            level.name
        );
        dispatched += level.dispatched();
        rejected += RejectReason::ALL
            .iter()
            .map(|&r| level.rejected(r))
            .sum::<u64>();
    }
    assert_eq!(dispatched, a_ok + p_ok, "every 200 was dispatched once");
    assert_eq!(rejected, a_429 + p_429, "every 429 was counted once");
    assert_eq!(dispatched + rejected, a_sent + p_sent, "no request lost");
    let level = dispatcher.level(LEVEL).expect("built in");
    assert_eq!(level.rejected(RejectReason::Cancelled), 0);
}

/// A client that hangs up while its request waits in a queue: the server
/// drops the request's future, which takes it out of the queue (counted as
/// cancelled), and it is never served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hanging_up_while_queued_cancels_its_request() {
    let dispatcher = dispatcher();
    let level = dispatcher.level(LEVEL).expect("built in");
    let seats = level.stats().queueset.concurrency_limit;
    let mut server = start_server(dispatcher.clone()).await;
    let run = async {
        // Hold every seat of the level.
        let mut holders = Vec::new();
        for i in 0..seats {
            let mut client = Client::connect(server.addr, &format!("holder-{i}")).await;
            holders.push(tokio::spawn(async move { client.get("/hold").await }));
        }
        for _ in 0..seats {
            server.started.recv().await.expect("a holder started");
        }
        // The leaver's request reaches the layer and queues; the server
        // reads the hang-up only after that.
        let mut leaver = TcpStream::connect(server.addr).await.expect("connect");
        leaver
            .write_all(b"GET /work HTTP/1.1\r\nhost: apf.test\r\nx-remote-user: leaver\r\n\r\n")
            .await
            .expect("write");
        loop {
            let user = server.classified.recv().await.expect("classified");
            if user == "leaver" {
                break;
            }
        }
        drop(leaver);
        server
            .closed
            .recv()
            .await
            .expect("the leaver's connection ends");
        let s = level.stats().queueset;
        assert_eq!(level.rejected(RejectReason::Cancelled), 1);
        assert_eq!((s.requests_waiting, s.seats_in_use), (0, seats));
        // Let the holders finish.
        server.release.send(true).expect("holders listen");
        for holder in holders {
            let answer = holder.await.expect("holder task").expect("holder answered");
            assert_eq!(answer.status, StatusCode::OK);
        }
    };
    tokio::time::timeout(TEST_TIMEOUT, run)
        .await
        .expect("the test finishes");
    let s = level.stats().queueset;
    assert_eq!((s.seats_in_use, s.requests_waiting), (0, 0));
    assert_eq!(level.dispatched(), u64::from(seats));
}
