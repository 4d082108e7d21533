//! The adaptive limit in a real server (issue 26's real-server check): the
//! tower layer on loopback (hyper 1, tokio, the real clock) in front of a
//! backend that slows down under concurrency. The backend serves `K`
//! requests at full speed; a request that arrives with `n > K` in flight
//! (itself included) sleeps `BASE × n / K`, so its service time is a
//! deterministic function of the concurrency the layer admitted (the
//! throughput past `K` stays `K / BASE`: more concurrency only adds
//! latency). The same closed-loop load (`CLIENTS` keep-alive connections)
//! runs behind a fixed limit twice too high (`2K` seats for the level) and
//! behind the adaptive limit; the test asserts that adaptive keeps the
//! backend's concurrency, hence its latency, near `K` where the fixed limit
//! doubles it.
//!
//! The assertions are on what the backend saw: its in-flight count at each
//! arrival, and the service time that count gives (its p99 against the
//! unloaded `BASE`), which a slow machine cannot change (a stall lengthens
//! latencies but admits no extra request). The measured latency is
//! asserted on its median only, with wide margins (the fixed run's at
//! least 1.5 × the unloaded one, the adaptive run's at most 0.85 × the
//! fixed run's): its p99 is printed, not asserted, since one stall of a
//! loaded CI machine moves it (seen: 1.4 to 2.0 × unloaded for the same
//! admitted concurrency). A behaviour check, not a timing benchmark; it
//! passed with three copies running at once beside two busy loops on 2
//! cores, but for its goodput floor. Bounded: about 7 s.
//!
//! `cargo test --features tower --test end_to_end adaptive_tower:: -- --nocapture`
//! prints the rows docs/adaptive-limit.md records.
#![cfg(feature = "tower")]

use apf::adaptive::AdaptiveOptions;
use apf::classification::OwnedDigest;
use apf::clock::Clock;
use apf::config::Config;
use apf::dispatcher::{Dispatcher, DispatcherOptions};
use apf::tower::ApfLayer;
use apf::work_estimate::WorkEstimate;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tower_layer::Layer;
use tower_service::Service;

/// The backend's capacity: requests it serves at full speed.
const K: usize = 8;
/// Its service time at or below `K` in flight.
const BASE: Duration = Duration::from_millis(40);
/// Closed-loop clients: four times `K`, so any limit is saturated.
const CLIENTS: usize = 4 * K;
/// The fixed total that gives the level `2K` seats (ceil(16 × 95 / 100)):
/// twice too high.
const FIXED_TOO_HIGH: u32 = 2 * K as u32;
/// Each run's length, and when its measured part begins (the adaptive
/// limit first probes, then slow-starts from `min_limit`).
const RUN: Duration = Duration::from_millis(3500);
const WARM_UP: Duration = Duration::from_millis(2000);

/// One level for the clients (95 of the 100 shares, lending nothing, a
/// queue long enough that nobody is rejected), beside catch-all's 5.
const CONFIG: &str = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: backend, uid: uid-backend}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 95
    lendablePercent: 0
    limitResponse: {type: Queue, queuing: {queues: 1, handSize: 1, queueLengthLimit: 1000}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: clients, uid: uid-clients}
spec:
  priorityLevelConfiguration: {name: backend}
  matchingPrecedence: 100
  rules:
  - subjects: [{kind: User, user: {name: client}}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
"#;

/// The adaptive run's tuning: the defaults, but windows of 100 ms (of at
/// least 8 completions) and a probe of 20 completions so that it settles
/// within the run, and a `min_limit` below `K` so the slow start starts
/// under the knee. `BASE` is 40 ms so that a loaded machine's scheduling
/// delays (a few ms) stay well under the 10% tolerance.
fn adaptive_options() -> AdaptiveOptions {
    AdaptiveOptions {
        min_limit: 2,
        update_interval: Duration::from_millis(100),
        min_window_samples: 8,
        probe_samples: 20,
        ..AdaptiveOptions::default()
    }
}

// ----- the backend -----------------------------------------------------------

/// One request as the backend saw it.
#[derive(Clone, Copy)]
struct Sample {
    arrived: Instant,
    in_flight: usize,
    /// The service time the backend meant: `BASE × max(1, n / K)`.
    service: Duration,
    latency: Duration,
}

#[derive(Default)]
struct BackendState {
    in_flight: AtomicUsize,
    samples: Mutex<Vec<Sample>>,
}

/// The backend: `BASE × max(1, n / K)` for a request arriving with `n` in
/// flight.
#[derive(Clone, Default)]
struct Backend(Arc<BackendState>);

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl Service<Request<Incoming>> for Backend {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request<Incoming>) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move {
            let arrived = Instant::now();
            let n = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            let service = BASE.mul_f64((n as f64 / K as f64).max(1.0));
            tokio::time::sleep(service).await;
            state.in_flight.fetch_sub(1, Ordering::SeqCst);
            let latency = arrived.elapsed();
            state.samples.lock().unwrap().push(Sample {
                arrived,
                in_flight: n,
                service,
                latency,
            });
            Ok(Response::new(Full::from("ok\n")))
        })
    }
}

fn classify<B>(_request: &Request<B>) -> (OwnedDigest, WorkEstimate) {
    let digest = OwnedDigest {
        user: "client".to_owned(),
        groups: vec!["system:authenticated".to_owned()],
        verb: "get".to_owned(),
        path: "/work".to_owned(),
        ..OwnedDigest::default()
    };
    (digest, WorkEstimate::new(1, 0, Duration::ZERO))
}

/// Serve `backend` behind the layer on a loopback port.
async fn serve(
    dispatcher: Arc<Dispatcher>,
    backend: Backend,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound");
    let layer = ApfLayer::new(dispatcher, classify);
    let accept = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = TowerToHyperService::new(layer.layer(backend.clone()));
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, accept)
}

/// `clients` keep-alive connections, each sending its next request when
/// the last answer came, until `run` has passed. Returns the answers that
/// were not 200.
async fn closed_loop(addr: SocketAddr, clients: usize, run: Duration) -> usize {
    let end = Instant::now() + run;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        tasks.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await.expect("connect");
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
                    .await
                    .expect("handshake");
            tokio::spawn(connection);
            let mut wrong = 0;
            while Instant::now() < end {
                sender.ready().await.expect("ready");
                let request = Request::get("/work")
                    .header("host", "apf.test")
                    .body(Empty::new())
                    .expect("valid request");
                let response = sender.send_request(request).await.expect("answered");
                if response.status() != StatusCode::OK {
                    wrong += 1;
                }
                response.into_body().collect().await.expect("body");
            }
            wrong
        }));
    }
    let mut wrong = 0;
    for t in tasks {
        wrong += t.await.expect("client");
    }
    wrong
}

/// What one run measured, over the requests that arrived after the
/// warm-up.
#[derive(Debug)]
struct Measured {
    per_second: f64,
    p50: Duration,
    p99: Duration,
    /// The p99 of the service times the backend meant.
    service_p99: Duration,
    in_flight_p99: usize,
    in_flight_max: usize,
    /// The adaptive total at the end (the fixed total otherwise).
    total: u32,
}

fn quantile<T: Copy + Ord>(sorted: &[T], q: f64) -> T {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

async fn run(
    options: DispatcherOptions,
    clients: usize,
    run: Duration,
    warm_up: Duration,
) -> Measured {
    let dispatcher = Arc::new(
        Dispatcher::new(
            &Config::from_slice(CONFIG.as_bytes()).expect("config"),
            options,
            Clock::real(),
        )
        .expect("options"),
    );
    let backend = Backend::default();
    let (addr, accept) = serve(dispatcher.clone(), backend.clone()).await;
    let start = Instant::now();
    let wrong = closed_loop(addr, clients, run).await;
    accept.abort();
    assert_eq!(
        wrong, 0,
        "every request is served (the queue holds them all)"
    );
    let samples: Vec<Sample> = backend
        .0
        .samples
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.arrived >= start + warm_up)
        .copied()
        .collect();
    assert!(samples.len() >= 20, "{} samples", samples.len());
    let mut latencies: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    latencies.sort();
    let mut in_flight: Vec<usize> = samples.iter().map(|s| s.in_flight).collect();
    in_flight.sort();
    let mut service: Vec<Duration> = samples.iter().map(|s| s.service).collect();
    service.sort();
    Measured {
        per_second: samples.len() as f64 / (run - warm_up).as_secs_f64(),
        p50: quantile(&latencies, 0.5),
        p99: quantile(&latencies, 0.99),
        service_p99: quantile(&service, 0.99),
        in_flight_p99: quantile(&in_flight, 0.99),
        in_flight_max: *in_flight.last().unwrap(),
        total: dispatcher.server_concurrency_limit(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_keeps_the_backend_near_its_capacity_where_a_fixed_limit_twice_too_high_does_not()
{
    let test = async {
        let fixed = |total| DispatcherOptions {
            server_concurrency_limit: total,
            ..DispatcherOptions::default()
        };
        // Unloaded: one client, so the backend never has more than one.
        let unloaded = run(
            fixed(FIXED_TOO_HIGH),
            1,
            Duration::from_millis(1000),
            Duration::ZERO,
        )
        .await;
        let too_high = run(
            fixed(FIXED_TOO_HIGH),
            CLIENTS,
            Duration::from_millis(1500),
            Duration::from_millis(300),
        )
        .await;
        let adaptive = run(
            DispatcherOptions {
                server_concurrency_limit: FIXED_TOO_HIGH,
                adaptive: Some(adaptive_options()),
                ..DispatcherOptions::default()
            },
            CLIENTS,
            RUN,
            WARM_UP,
        )
        .await;
        (unloaded, too_high, adaptive)
    };
    let (unloaded, too_high, adaptive) = tokio::time::timeout(Duration::from_secs(60), test)
        .await
        .expect("the runs end");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("| run | served /s | latency p50 | p99 | service time p99 (backend's model) | backend in flight p99 | max | total at the end |");
    for (name, m) in [
        ("unloaded (1 client)", &unloaded),
        ("fixed 16 (2× too high)", &too_high),
        ("adaptive", &adaptive),
    ] {
        println!(
            "| {name} | {:.0} | {:.1} ms | {:.1} ms | {:.1} ms | {} | {} | {} |",
            m.per_second,
            ms(m.p50),
            ms(m.p99),
            ms(m.service_p99),
            m.in_flight_p99,
            m.in_flight_max,
            m.total,
        );
    }
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    assert_eq!(unloaded.in_flight_max, 1);
    // The fixed limit lets the level hold 2K requests in the backend, so
    // they take twice the unloaded time.
    assert_eq!(too_high.in_flight_max, 2 * K, "{too_high:?}");
    assert_eq!(too_high.in_flight_p99, 2 * K, "{too_high:?}");
    assert_eq!(too_high.service_p99, BASE * 2, "{too_high:?}");
    assert!(
        ratio(too_high.p50, unloaded.p50) >= 1.5,
        "{too_high:?} {unloaded:?}"
    );
    // Adaptive keeps 99% of the backend's arrivals at or under 1.5 K in
    // flight (a service time of at most 1.5 × BASE) and never reaches the
    // fixed limit's 2K; its median latency stays well under the fixed
    // limit's; and it keeps serving (at least 30% of what the fixed limit
    // serves, the backend's whole K / BASE a second; about 100% on a quiet
    // machine, but on a saturated CPU the scheduling delays read as
    // congestion and the total settles lower: seen 47%).
    assert!(adaptive.in_flight_p99 <= K + K / 2, "{adaptive:?}");
    assert!(adaptive.service_p99 <= BASE.mul_f64(1.5), "{adaptive:?}");
    assert!(adaptive.in_flight_max < 2 * K, "{adaptive:?}");
    assert!(
        ratio(adaptive.p50, too_high.p50) <= 0.85,
        "{adaptive:?} {too_high:?}"
    );
    assert!(
        adaptive.per_second >= 0.3 * too_high.per_second,
        "{adaptive:?} {too_high:?}"
    );
}
