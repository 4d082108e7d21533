//! The layer on the manual clock, driven by hand: each request's body is a
//! gate the test opens to let its handler finish.

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::config::Config;
use crate::dispatcher::DispatcherOptions;
use crate::queueset::RejectReason;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Waker;
use std::time::Duration;

const CONFIG: &str = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: tenants, uid: pl-uid-tenants}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    lendablePercent: 0
    limitResponse:
      type: Queue
      queuing: {queues: 1, handSize: 1, queueLengthLimit: 1}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: tenants, uid: fs-uid-tenants}
spec:
  priorityLevelConfiguration: {name: tenants}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: Group, group: {name: tenants}}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
"#;

const WAIT_LIMIT: Duration = Duration::from_secs(15);

/// A request body: the handler finishes once it is opened.
type Gate = Arc<AtomicBool>;

/// The inner service: counts calls, answers 200 once the request's gate
/// opens.
#[derive(Clone, Default)]
struct Handler {
    calls: Arc<AtomicUsize>,
}

struct Gated(Gate);

impl Future for Gated {
    type Output = Result<Response<String>, Infallible>;
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.0.load(Ordering::Acquire) {
            Poll::Ready(Ok(Response::new("served".to_owned())))
        } else {
            Poll::Pending
        }
    }
}

impl Service<Request<Gate>> for Handler {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Gated;
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, request: Request<Gate>) -> Gated {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Gated(request.into_body())
    }
}

/// A request in flight, and the gate that lets its handler finish.
type InFlight = (Pin<Box<ResponseFuture<Handler, Gate>>>, Gate);

type Classify = fn(&Request<Gate>) -> (OwnedDigest, WorkEstimate);

/// Classifies by the `x-remote-user` and `x-remote-group` headers.
fn classify(request: &Request<Gate>) -> (OwnedDigest, WorkEstimate) {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let digest = OwnedDigest {
        user: header("x-remote-user"),
        groups: vec![header("x-remote-group"), "system:authenticated".to_owned()],
        verb: "get".to_owned(),
        path: request.uri().path().to_owned(),
        ..OwnedDigest::default()
    };
    (digest, WorkEstimate::new(1, 0, Duration::ZERO))
}

struct Fixture {
    service: Apf<Handler, Classify>,
    layer: ApfLayer<Classify>,
    calls: Arc<AtomicUsize>,
    manual: ManualClock,
}

impl Fixture {
    fn new() -> Fixture {
        let (clock, manual) = Clock::manual();
        let options = DispatcherOptions {
            server_concurrency_limit: 6,
            wait_limit: WAIT_LIMIT,
            ..DispatcherOptions::default()
        };
        let config = Config::from_yaml_str(CONFIG).expect("parses");
        let dispatcher = Arc::new(Dispatcher::new(&config, options, clock).expect("valid"));
        let layer = ApfLayer::new(dispatcher, classify as Classify);
        let handler = Handler::default();
        let calls = handler.calls.clone();
        Fixture {
            service: layer.layer(handler),
            layer,
            calls,
            manual,
        }
    }

    fn tenants(&self) -> Arc<Level> {
        self.layer
            .dispatcher()
            .level("tenants")
            .expect("configured")
    }

    fn limit(&self) -> u32 {
        self.tenants().stats().queueset.concurrency_limit
    }

    /// A request from `user` in `group`, and the gate that finishes it.
    fn call(&mut self, user: &str, group: &str) -> InFlight {
        let gate = Gate::default();
        let request = Request::builder()
            .uri("/things")
            .header("x-remote-user", user)
            .header("x-remote-group", group)
            .body(gate.clone())
            .expect("valid request");
        (Box::pin(self.service.call(request)), gate)
    }

    /// Fill every seat of `tenants`: the futures (polled once, running)
    /// and their gates.
    fn occupy(&mut self) -> Vec<InFlight> {
        let mut held: Vec<_> = (0..self.limit())
            .map(|i| self.call(&format!("holder-{i}"), "tenants"))
            .collect();
        for (future, _) in &mut held {
            assert!(poll(future).is_pending(), "the handler waits for its gate");
        }
        assert_eq!(self.tenants().stats().queueset.seats_in_use, self.limit());
        held
    }
}

fn poll<F: Future + ?Sized>(future: &mut Pin<Box<F>>) -> Poll<F::Output> {
    future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
}

fn header<'r>(response: &'r Response<String>, name: &str) -> &'r str {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no {name} header"))
}

#[test]
fn an_admitted_request_holds_its_seat_until_its_response_is_ready() {
    let mut f = Fixture::new();
    assert!(f.limit() >= 1);
    let (mut future, gate) = f.call("alice", "tenants");
    assert!(poll(&mut future).is_pending());
    assert_eq!(f.calls.load(Ordering::Relaxed), 1);
    assert_eq!(f.tenants().stats().queueset.seats_in_use, 1);
    gate.store(true, Ordering::Release);
    let Poll::Ready(Ok(response)) = poll(&mut future) else {
        panic!("the handler has finished")
    };
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.body(), "served");
    assert_eq!(
        header(&response, "x-kubernetes-pf-flowschema-uid"),
        "fs-uid-tenants"
    );
    assert_eq!(
        header(&response, "x-kubernetes-pf-prioritylevel-uid"),
        "pl-uid-tenants"
    );
    assert_eq!(f.tenants().stats().queueset.seats_in_use, 0);
    assert_eq!(f.tenants().dispatched(), 1);
}

#[test]
fn objects_without_a_uid_send_derived_uids_not_names() {
    let mut f = Fixture::new();
    let (mut future, gate) = f.call("bob", "others");
    gate.store(true, Ordering::Release);
    let Poll::Ready(Ok(response)) = poll(&mut future) else {
        panic!("catch-all has a free seat")
    };
    assert_eq!(
        header(&response, "x-kubernetes-pf-flowschema-uid"),
        crate::uid::flow_schema_uid("catch-all")
    );
    assert_eq!(
        header(&response, "x-kubernetes-pf-prioritylevel-uid"),
        crate::uid::priority_level_uid("catch-all")
    );
}

#[test]
fn dropping_a_running_request_frees_its_seat() {
    let mut f = Fixture::new();
    let (mut future, _gate) = f.call("alice", "tenants");
    assert!(poll(&mut future).is_pending());
    assert_eq!(f.tenants().stats().queueset.seats_in_use, 1);
    drop(future);
    assert_eq!(f.tenants().stats().queueset.seats_in_use, 0);
}

#[test]
fn a_queued_request_runs_once_a_seat_frees() {
    let mut f = Fixture::new();
    let mut held = f.occupy();
    let (mut queued, queued_gate) = f.call("carol", "tenants");
    assert!(poll(&mut queued).is_pending());
    assert_eq!(f.tenants().stats().queueset.requests_waiting, 1);
    let calls_before = f.calls.load(Ordering::Relaxed);
    let (mut first, first_gate) = held.remove(0);
    first_gate.store(true, Ordering::Release);
    assert!(matches!(poll(&mut first), Poll::Ready(Ok(_))));
    assert!(poll(&mut queued).is_pending(), "dispatched, now running");
    assert_eq!(f.calls.load(Ordering::Relaxed), calls_before + 1);
    queued_gate.store(true, Ordering::Release);
    let Poll::Ready(Ok(response)) = poll(&mut queued) else {
        panic!("finished")
    };
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        header(&response, "x-kubernetes-pf-prioritylevel-uid"),
        "pl-uid-tenants"
    );
    drop(held);
    let stats = f.tenants().stats().queueset;
    assert_eq!((stats.seats_in_use, stats.requests_waiting), (0, 0));
}

#[test]
fn a_client_going_away_cancels_its_queued_request() {
    let mut f = Fixture::new();
    let held = f.occupy();
    let calls_before = f.calls.load(Ordering::Relaxed);
    let (mut queued, _gate) = f.call("carol", "tenants");
    assert!(poll(&mut queued).is_pending());
    assert_eq!(f.tenants().stats().queueset.requests_waiting, 1);
    drop(queued);
    assert_eq!(f.tenants().stats().queueset.requests_waiting, 0);
    assert_eq!(f.tenants().rejected(RejectReason::Cancelled), 1);
    assert_eq!(
        f.calls.load(Ordering::Relaxed),
        calls_before,
        "never served"
    );
    drop(held);
    assert_eq!(f.tenants().stats().queueset.seats_in_use, 0);
}

#[test]
fn a_full_queue_answers_429_with_retry_after_and_the_pf_headers() {
    let mut f = Fixture::new();
    let held = f.occupy();
    let (mut queued, _g) = f.call("carol", "tenants");
    assert!(poll(&mut queued).is_pending());
    let (mut rejected, _g) = f.call("dave", "tenants");
    let Poll::Ready(Ok(response)) = poll(&mut rejected) else {
        panic!("rejected at once")
    };
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&response, "retry-after"), "1");
    assert_eq!(header(&response, "content-type"), "application/json");
    assert_eq!(
        header(&response, "x-kubernetes-pf-flowschema-uid"),
        "fs-uid-tenants"
    );
    assert_eq!(
        header(&response, "x-kubernetes-pf-prioritylevel-uid"),
        "pl-uid-tenants"
    );
    assert_eq!(
        response.body(),
        &crate::rejection::status_body("tenants", "tenants", RejectReason::QueueFull, 1)
    );
    assert_eq!(f.tenants().rejected(RejectReason::QueueFull), 1);
    drop((held, queued));
}

#[test]
fn a_request_that_waits_past_the_limit_answers_429() {
    let mut f = Fixture::new();
    let held = f.occupy();
    let (mut queued, _g) = f.call("carol", "tenants");
    assert!(poll(&mut queued).is_pending());
    f.manual.advance(WAIT_LIMIT + Duration::from_millis(1));
    let Poll::Ready(Ok(response)) = poll(&mut queued) else {
        panic!("timed out")
    };
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        response.body().contains(r#""reason":"time-out""#),
        "{}",
        response.body()
    );
    assert_eq!(f.tenants().rejected(RejectReason::TimeOut), 1);
    assert_eq!(f.tenants().stats().queueset.requests_waiting, 0);
    drop(held);
}

/// Three rejections in one second double the next second's Retry-After.
#[test]
fn retry_after_grows_with_the_level_rejections() {
    let mut f = Fixture::new();
    let held = f.occupy();
    let (mut queued, _g) = f.call("carol", "tenants");
    assert!(poll(&mut queued).is_pending());
    let reject = |f: &mut Fixture| {
        let (mut future, _g) = f.call("dave", "tenants");
        match poll(&mut future) {
            Poll::Ready(Ok(r)) if r.status() == StatusCode::TOO_MANY_REQUESTS => {
                header(&r, "retry-after").to_owned()
            }
            _ => panic!("the queue is full"),
        }
    };
    for _ in 0..3 {
        assert_eq!(reject(&mut f), "1");
    }
    f.manual.advance(Duration::from_secs(1));
    assert_eq!(reject(&mut f), "2");
    assert_eq!(f.layer.dropped_requests().retry_after("tenants"), 2);
    drop((held, queued));
}

#[test]
fn the_observe_service_answers_metrics_dumps_and_404() {
    let (clock, _manual) = Clock::manual();
    let dispatcher = Arc::new(Dispatcher::builtin(DispatcherOptions::default(), clock));
    let mut service = observe::<String>(dispatcher.clone());
    let get = |service: &mut ObserveService, uri: &str| {
        let request = Request::builder().uri(uri).body(()).expect("a request");
        let mut future = service.call(request);
        match Pin::new(&mut future).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(response)) => response,
            _ => panic!("answers at once"),
        }
    };
    let metrics = get(&mut service, "/metrics");
    assert_eq!(metrics.status(), StatusCode::OK);
    assert_eq!(
        header(&metrics, "content-type"),
        crate::metrics::CONTENT_TYPE
    );
    let dump = get(
        &mut service,
        "/debug/api_priority_and_fairness/dump_requests?includeRequestDetails=1",
    );
    assert_eq!(dump.body(), &dispatcher.dump_requests(true));
    assert_eq!(get(&mut service, "/other").status(), StatusCode::NOT_FOUND);
}
