//! A [tower] layer that puts APF in front of any HTTP service built on the
//! `http` crate's types (hyper, axum, tonic). Cargo feature `tower`.
//!
//! For each request the layer calls a user-supplied function that describes
//! it ([`OwnedDigest`], [`WorkEstimate`]), asks the [`Dispatcher`], and then:
//! - **execute**: calls the inner service and holds the request's seats
//!   until the inner service's response future completes or is dropped
//!   (a body streamed after the response head is not counted);
//! - **queued**: waits for its turn without blocking a thread; if the
//!   client goes away the server drops the response future, which drops
//!   the ticket, which takes the request out of its queue (cancelled);
//! - **rejected** (now, or later from the queue: full, timed out): answers
//!   [`crate::rejection`]'s `429 Too Many Requests`, the same in every
//!   libapf middleware: a Kubernetes `Status` JSON body and `Retry-After`,
//!   computed per priority level from its recent rejections as Kubernetes
//!   does ([`DroppedRequests`], kept by the dispatcher).
//!
//! A queued request waits at most the dispatcher's
//! [`wait_limit`](crate::dispatcher::DispatcherOptions::wait_limit)
//! (Kubernetes derives a per-request limit from the request's timeout; a
//! server with its own deadlines can drop the response future earlier).
//!
//! The response body type must be buildable from a `String` (for the
//! 429's JSON): `String`, `http_body_util::Full<Bytes>`, axum's `Body` are.
//!
//! Every response, served or rejected, carries
//! `X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID`
//! with the objects' UIDs, as Kubernetes sends them; objects without
//! `metadata.uid` (the built-in ones) have stable UIDs derived from their
//! names ([`crate::uid`]).
//!
//! [`observe`] answers `/metrics` and Kubernetes' debug dumps.
//!
//! ```
//! use apf::clock::Clock;
//! use apf::dispatcher::{Dispatcher, DispatcherOptions};
//! use apf::classification::OwnedDigest;
//! use apf::tower::ApfLayer;
//! use apf::work_estimate::WorkEstimate;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let dispatcher = Arc::new(Dispatcher::builtin(DispatcherOptions::default(), Clock::real()));
//! let layer = ApfLayer::new(dispatcher, |request: &http::Request<()>| {
//!     let user = request.headers().get("x-remote-user").and_then(|v| v.to_str().ok());
//!     let digest = OwnedDigest {
//!         user: user.unwrap_or("system:anonymous").to_owned(),
//!         groups: vec!["system:authenticated".to_owned()],
//!         verb: request.method().as_str().to_ascii_lowercase(),
//!         path: request.uri().path().to_owned(),
//!         ..OwnedDigest::default()
//!     };
//!     (digest, WorkEstimate::new(1, 0, Duration::ZERO))
//! });
//! # let _ = layer;
//! ```
//!
//! [tower]: https://docs.rs/tower

use crate::classification::OwnedDigest;
use crate::dispatcher::{Decision, Dispatcher, Outcome};
use crate::level::{Lease, Level, RequestGuard, RequestTicket, Schema};
use crate::queueset::RejectReason;
use crate::rejection::Rejection;
use crate::retry_after::DroppedRequests;
use crate::sync::Arc;
use crate::work_estimate::WorkEstimate;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

/// The matched flow schema's UID.
pub const FLOW_SCHEMA_UID: HeaderName = HeaderName::from_static("x-kubernetes-pf-flowschema-uid");
/// The matched priority level's UID.
pub const PRIORITY_LEVEL_UID: HeaderName =
    HeaderName::from_static("x-kubernetes-pf-prioritylevel-uid");

mod observe_service;
pub use observe_service::{observe, ObserveService};

/// The layer: wraps a service in [`Apf`].
///
/// `classify` maps a request to its digest and work estimate; it runs on
/// every request before anything else, so keep it cheap.
pub struct ApfLayer<F> {
    shared: Arc<Shared<F>>,
}

struct Shared<F> {
    dispatcher: Arc<Dispatcher>,
    classify: F,
}

impl<F> ApfLayer<F> {
    /// A layer that admits requests through `dispatcher`, classifying each with
    /// `classify`. Rejected requests get a 429 with `Retry-After`, as Kubernetes
    /// answers them.
    pub fn new(dispatcher: Arc<Dispatcher>, classify: F) -> Self {
        ApfLayer {
            shared: Arc::new(Shared {
                dispatcher,
                classify,
            }),
        }
    }

    /// The dispatcher requests go through.
    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.shared.dispatcher
    }

    /// The rejection history behind `Retry-After` (the dispatcher's).
    pub fn dropped_requests(&self) -> &DroppedRequests {
        self.shared.dispatcher.dropped_requests()
    }
}

impl<F> Clone for ApfLayer<F> {
    fn clone(&self) -> Self {
        ApfLayer {
            shared: self.shared.clone(),
        }
    }
}

impl<F> fmt::Debug for ApfLayer<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApfLayer")
            .field("dispatcher", &self.shared.dispatcher)
            .finish()
    }
}

impl<S, F> Layer<S> for ApfLayer<F> {
    type Service = Apf<S, F>;

    fn layer(&self, inner: S) -> Apf<S, F> {
        Apf {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// A service behind APF admission. See the module documentation.
pub struct Apf<S, F> {
    inner: S,
    shared: Arc<Shared<F>>,
}

impl<S: Clone, F> Clone for Apf<S, F> {
    fn clone(&self) -> Self {
        Apf {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: fmt::Debug, F> fmt::Debug for Apf<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Apf").field("inner", &self.inner).finish()
    }
}

impl<S, F, ReqBody, ResBody> Service<Request<ReqBody>> for Apf<S, F>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    F: Fn(&Request<ReqBody>) -> (OwnedDigest, WorkEstimate),
    ResBody: From<String>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    /// Always ready: admission is APF's to decide, per request, and the
    /// inner service's readiness is awaited once a request is admitted
    /// (waiting on it here would hold back requests of every level alike).
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (digest, estimate) = (self.shared.classify)(&request);
        let decision =
            digest.with_digest(|d| self.shared.dispatcher.start_request(d, estimate, None));
        let headers = PfHeaders::of(&decision);
        let Decision {
            outcome,
            priority_level,
            flow_schema,
            ..
        } = decision;
        let state = match outcome {
            Outcome::Execute(guard) => State::Admitted {
                service: self.inner.clone(),
                request: Some(request),
                guard: Some(guard),
            },
            Outcome::Queued(ticket) => State::Queued {
                waiting: Waiting {
                    ticket: Some(ticket),
                    level: priority_level,
                    schema: flow_schema,
                    dispatcher: self.shared.dispatcher.clone(),
                },
                service: Some(self.inner.clone()),
                request: Some(request),
            },
            Outcome::Rejected(reason) => State::Rejected {
                rejection: self.shared.dispatcher.reject(
                    &priority_level.name,
                    &flow_schema.name,
                    reason,
                ),
            },
        };
        ResponseFuture { state, headers }
    }
}

/// The classification headers of one request.
#[derive(Clone, Debug)]
struct PfHeaders {
    flow_schema: Option<HeaderValue>,
    priority_level: Option<HeaderValue>,
}

impl PfHeaders {
    fn of(decision: &Decision) -> PfHeaders {
        let value = |uid: &Option<String>, name: &str| {
            HeaderValue::from_str(uid.as_deref().unwrap_or(name)).ok()
        };
        PfHeaders {
            flow_schema: value(&decision.flow_schema.uid, &decision.flow_schema.name),
            priority_level: value(&decision.priority_level.uid, &decision.priority_level.name),
        }
    }

    fn apply(&self, headers: &mut HeaderMap) {
        if let Some(v) = &self.flow_schema {
            headers.insert(FLOW_SCHEMA_UID, v.clone());
        }
        if let Some(v) = &self.priority_level {
            headers.insert(PRIORITY_LEVEL_UID, v.clone());
        }
    }
}

/// A waiting request. Dropped while still in its queue (the client went
/// away), it is cancelled and counts as a rejection for `Retry-After`, as
/// Kubernetes counts every request it did not serve.
struct Waiting {
    ticket: Option<RequestTicket>,
    level: Lease<Level>,
    schema: Lease<Schema>,
    dispatcher: Arc<Dispatcher>,
}

impl Waiting {
    fn reject(&self, reason: RejectReason) -> Rejection {
        self.dispatcher
            .reject(&self.level.name, &self.schema.name, reason)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            if ticket.cancel() {
                // No answer to make (the client is gone); only the count.
                self.dispatcher.dropped_requests().record(&self.level.name);
            }
        }
    }
}

pin_project! {
    /// The response of an [`Apf`] service.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B>,
        headers: PfHeaders,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B>
    where
        S: Service<Request<B>>,
    {
        Queued {
            waiting: Waiting,
            service: Option<S>,
            request: Option<Request<B>>,
        },
        Admitted {
            service: S,
            request: Option<Request<B>>,
            guard: Option<RequestGuard>,
        },
        // `future` is declared before `guard`: dropped first, so the seats
        // are released only once the handler's work is gone.
        Running {
            #[pin]
            future: S::Future,
            guard: Option<RequestGuard>,
        },
        Rejected {
            rejection: Rejection,
        },
        Done,
    }
}

impl<S, B> fmt::Debug for ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Queued { .. } => "queued",
            State::Admitted { .. } => "admitted",
            State::Running { .. } => "running",
            State::Rejected { .. } => "rejected",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S, B, ResBody> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    ResBody: From<String>,
{
    type Output = Result<Response<ResBody>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Queued {
                    waiting,
                    service,
                    request,
                } => {
                    let Some(ticket) = waiting.ticket.as_mut() else {
                        unreachable!("a queued state holds its ticket until it moves on")
                    };
                    match ready!(Pin::new(ticket).poll(cx)) {
                        Ok(guard) => {
                            let (Some(service), request) = (service.take(), request.take()) else {
                                unreachable!("a queued state holds its service")
                            };
                            this.state.set(State::Admitted {
                                service,
                                request,
                                guard: Some(guard),
                            });
                        }
                        Err(reason) => {
                            let rejection = waiting.reject(reason);
                            this.state.set(State::Done);
                            return Poll::Ready(Ok(too_many_requests(rejection, this.headers)));
                        }
                    }
                }
                StateProj::Admitted {
                    service,
                    request,
                    guard,
                } => {
                    if let Err(e) = ready!(service.poll_ready(cx)) {
                        this.state.set(State::Done);
                        return Poll::Ready(Err(e));
                    }
                    let Some(request) = request.take() else {
                        unreachable!("an admitted state holds its request until the call")
                    };
                    let future = service.call(request);
                    let guard = guard.take();
                    this.state.set(State::Running { future, guard });
                }
                StateProj::Running { future, guard } => {
                    let result = ready!(future.poll(cx));
                    // Seats are free before the response goes out, so a
                    // client that has its answer never sees them taken.
                    drop(guard.take());
                    this.state.set(State::Done);
                    return Poll::Ready(result.map(|mut response| {
                        this.headers.apply(response.headers_mut());
                        response
                    }));
                }
                StateProj::Rejected { rejection } => {
                    let rejection = std::mem::replace(
                        rejection,
                        Rejection {
                            retry_after: 0,
                            body: String::new(),
                        },
                    );
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(too_many_requests(rejection, this.headers)));
                }
                StateProj::Done => panic!("apf::tower::ResponseFuture polled after completion"),
            }
        }
    }
}

/// The answer to a request that will not be served ([`crate::rejection`]).
fn too_many_requests<B: From<String>>(rejection: Rejection, pf: &PfHeaders) -> Response<B> {
    let mut response = Response::new(B::from(rejection.body));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(RETRY_AFTER, HeaderValue::from(rejection.retry_after));
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(crate::rejection::CONTENT_TYPE),
    );
    pf.apply(headers);
    response
}

#[cfg(all(test, not(loom)))]
mod tests;
