//! A tower service answering `/metrics` and Kubernetes' debug dumps
//! ([`crate::observe::answer`]), 404 for any other path.

use crate::dispatcher::Dispatcher;
use crate::sync::Arc;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::fmt;
use std::future::{ready, Ready};
use std::marker::PhantomData;
use std::task::{Context, Poll};
use tower_service::Service;

/// Serves `/metrics` and `/debug/api_priority_and_fairness/dump_*` of a
/// dispatcher; mount it where only operators reach (the dumps name users
/// and paths). Answers at once, without going through admission, so it
/// stays reachable when the server is saturated.
/// `ResBody` is the response body type (built from a `String`).
pub struct ObserveService<ResBody = String> {
    dispatcher: Arc<Dispatcher>,
    body: PhantomData<fn() -> ResBody>,
}

/// The [`ObserveService`] of `dispatcher`.
pub fn observe<ResBody>(dispatcher: Arc<Dispatcher>) -> ObserveService<ResBody> {
    ObserveService {
        dispatcher,
        body: PhantomData,
    }
}

impl<ResBody> Clone for ObserveService<ResBody> {
    fn clone(&self) -> Self {
        observe(self.dispatcher.clone())
    }
}

impl<ResBody> fmt::Debug for ObserveService<ResBody> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObserveService").finish_non_exhaustive()
    }
}

impl<B, ResBody: From<String>> Service<Request<B>> for ObserveService<ResBody> {
    type Response = Response<ResBody>;
    type Error = Infallible;
    type Future = Ready<Result<Response<ResBody>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let uri = request.uri();
        let found = crate::observe::answer(
            &self.dispatcher,
            uri.path(),
            uri.query().unwrap_or_default(),
        );
        let (status, content_type, body) = match found {
            Some(a) => (
                StatusCode::from_u16(a.status).unwrap_or(StatusCode::OK),
                a.content_type,
                a.body,
            ),
            None => (
                StatusCode::NOT_FOUND,
                crate::observe::TEXT_CONTENT_TYPE,
                "404 page not found\n".to_owned(),
            ),
        };
        let mut response = Response::new(ResBody::from(body));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        ready(Ok(response))
    }
}
