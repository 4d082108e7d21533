//! The shared middleware expectations (tests/data/middleware-expectations.json)
//! against the tower layer and its ready observability service. Go and
//! Python check the same file against their middlewares; see its comment.
#![cfg(feature = "tower")]

use apf::classification::OwnedDigest;
use apf::classification::RequestInfo;
use apf::clock::{Clock, ManualClock};
use apf::config::Config;
use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
use apf::level::RequestGuard;
use apf::tower::{observe, ApfLayer};
use apf::work_estimate::WorkEstimate;
use http::{Request, Response};
use serde_json::Value;
use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tower_layer::Layer;
use tower_service::Service;

const GROUPS: [&str; 2] = ["tenants", "system:authenticated"];

/// The handler behind the middleware: 200, `ok\n`.
#[derive(Clone)]
struct Served;

impl Service<Request<()>> for Served {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _request: Request<()>) -> Self::Future {
        let mut response = Response::new("ok\n".to_owned());
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        ready(Ok(response))
    }
}

fn classify(request: &Request<()>) -> (OwnedDigest, WorkEstimate) {
    let user = request
        .headers()
        .get("x-remote-user")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("system:anonymous")
        .to_owned();
    let query = request.uri().query().unwrap_or("");
    let info = RequestInfo::parse(request.method().as_str(), request.uri().path(), query);
    let groups = GROUPS.iter().map(|g| (*g).to_owned()).collect();
    let digest = OwnedDigest::from_info(&info, user, groups);
    (digest, WorkEstimate::new(1, 0, Duration::ZERO))
}

/// Poll once: every step of the sequence completes at once (nothing
/// queues).
fn now<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the step did not complete at once"),
    }
}

struct Harness {
    dispatcher: Arc<Dispatcher>,
    manual: ManualClock,
    held: Vec<RequestGuard>,
}

impl Harness {
    fn new(doc: &Value) -> Harness {
        let (clock, manual) = Clock::manual();
        let options = DispatcherOptions {
            server_concurrency_limit: doc["server_concurrency_limit"].as_u64().expect("a limit")
                as u32,
            wait_limit: Duration::from_secs(doc["wait_limit_seconds"].as_u64().expect("a limit")),
            ..DispatcherOptions::default()
        };
        let config =
            Config::from_yaml_str(doc["config"].as_str().expect("config")).expect("parses");
        let dispatcher = Arc::new(Dispatcher::new(&config, options, clock).expect("valid"));
        Harness {
            dispatcher,
            manual,
            held: Vec::new(),
        }
    }

    fn request(&self, method: &str, path: &str, user: &str) -> Response<String> {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("x-remote-user", user)
            .body(())
            .expect("a request");
        let (uri_path, query) = (request.uri().path(), request.uri().query().unwrap_or(""));
        if apf::observe::answer(&self.dispatcher, uri_path, query).is_some() {
            let mut service = observe::<String>(self.dispatcher.clone());
            return now(service.call(request)).expect("infallible");
        }
        let layer = ApfLayer::new(self.dispatcher.clone(), classify);
        now(layer.layer(Served).call(request)).expect("infallible")
    }

    fn hold(&mut self, user: &str) {
        let info = RequestInfo::parse("GET", "/api/v1/pods", "");
        let decision = self.dispatcher.start_request(
            &info.digest(user, &GROUPS),
            WorkEstimate::new(1, 0, Duration::ZERO),
            None,
        );
        match decision.outcome {
            Outcome::Execute(guard) => self.held.push(guard),
            other => panic!("hold: {other:?}"),
        }
    }
}

fn check(step: &str, response: &Response<String>, expect: &Value) {
    assert_eq!(
        u64::from(response.status().as_u16()),
        expect["status"].as_u64().expect("a status"),
        "{step}: status; body {}",
        response.body()
    );
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().expect("ASCII").to_owned())
    };
    if let Some(headers) = expect["headers"].as_object() {
        for (name, value) in headers {
            assert_eq!(
                header(name).as_deref(),
                value.as_str(),
                "{step}: header {name}"
            );
        }
    }
    for name in expect["absent_headers"].as_array().into_iter().flatten() {
        let name = name.as_str().expect("a name");
        assert_eq!(header(name), None, "{step}: header {name} should be absent");
    }
    if let Some(body) = expect["body"].as_str() {
        assert_eq!(response.body(), body, "{step}: body");
    }
    if let Some(prefix) = expect["body_starts_with"].as_str() {
        assert!(
            response.body().starts_with(prefix),
            "{step}: body {}",
            response.body()
        );
    }
}

#[test]
fn the_tower_layer_meets_the_shared_expectations() {
    let doc: Value =
        serde_json::from_str(include_str!("../data/middleware-expectations.json")).expect("JSON");
    let mut h = Harness::new(&doc);
    let steps = doc["steps"].as_array().expect("steps");
    assert!(steps.len() >= 10);
    for step in steps {
        let name = step["name"].as_str().expect("a name");
        if let Some(r) = step.get("request") {
            let s = |k: &str| r[k].as_str().expect("a string");
            let response = h.request(s("method"), s("path"), s("user"));
            check(name, &response, &step["expect"]);
        } else if let Some(hold) = step.get("hold") {
            h.hold(hold["user"].as_str().expect("a user"));
        } else if step.get("release").is_some() {
            h.held.clear();
        } else if let Some(seconds) = step["advance_seconds"].as_u64() {
            h.manual.advance(Duration::from_secs(seconds));
        } else {
            panic!("unknown step {step}");
        }
    }
}
