//! libapf: Kubernetes' API Priority and Fairness (KEP-1040) and the
//! client-go workqueue family, embeddable in any server (and, through the
//! repository's `capi/` crate, from C, C++, Go and Python).
//!
//! A server under more load than it can take must choose whom to serve.
//! API Priority and Fairness gives each class of traffic (a *priority
//! level*) its own share of the server's concurrency, counted in *seats*,
//! so a flood in one class cannot starve another; within a level, fair
//! queuing serves each *flow* (a tenant, a user) in turn. Requests are
//! classified by *FlowSchemas*, the same objects a Kubernetes cluster uses.
//!
//! # Guide
//!
//! ## A dispatcher with Kubernetes' built-in configuration
//!
//! A [`Dispatcher`](dispatcher::Dispatcher) holds a configuration of flow
//! schemas and priority levels and decides on each request: execute now (a
//! [`RequestGuard`](level::RequestGuard) holding its seats), wait in a fair
//! queue (a [`RequestTicket`](level::RequestTicket)), or reject. Describe
//! the request with a [`RequestDigest`](classification::RequestDigest)
//! (who, and what it asks for; your authentication fills in the user and
//! groups) and its cost with a [`WorkEstimate`](work_estimate::WorkEstimate)
//! (seats; one for an ordinary request).
//!
//! ```
//! use apf::classification::RequestDigest;
//! use apf::clock::Clock;
//! use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
//! use apf::work_estimate::WorkEstimate;
//! use std::time::Duration;
//!
//! // 600 seats shared by all levels, Kubernetes' default.
//! let dispatcher = Dispatcher::builtin(DispatcherOptions::default(), Clock::real());
//!
//! let digest = RequestDigest {
//!     user: "alice",
//!     groups: &["system:authenticated"],
//!     verb: "list",
//!     is_resource_request: true,
//!     resource: "pods",
//!     namespace: "shop",
//!     path: "/api/v1/namespaces/shop/pods",
//!     ..RequestDigest::default()
//! };
//! let decision = dispatcher.start_request(&digest, WorkEstimate::new(1, 0, Duration::ZERO), None);
//! // Where it was classified (servers report these in response headers).
//! assert_eq!(decision.flow_schema.name, "global-default");
//! assert_eq!(decision.priority_level.name, "global-default");
//! match decision.outcome {
//!     Outcome::Execute(guard) => {
//!         // ... serve the request, then give its seats back (dropping the
//!         // guard does the same, so an early return or a panic cannot
//!         // leak seats):
//!         guard.finish();
//!     }
//!     Outcome::Queued(ticket) => {
//!         // Blocks until dispatched or rejected; `RequestTicket` is also a
//!         // `Future` for async servers, and dropping it cancels.
//!         match ticket.wait() {
//!             Ok(guard) => guard.finish(),
//!             Err(reason) => println!("rejected while waiting: {reason}"),
//!         }
//!     }
//!     // Answer 429 Too Many Requests (the `tower` feature's layer does,
//!     // with Kubernetes' Retry-After).
//!     Outcome::Rejected(reason) => println!("rejected: {reason}"),
//! }
//! ```
//!
//! A [`Dispatcher`](dispatcher::Dispatcher) is `Send + Sync`: share one
//! (in an `Arc`) among all the threads or tasks that serve requests. When
//! nothing waits, admitting and finishing take no lock and allocate nothing.
//!
//! ## Classification on its own
//!
//! A [`Classifier`](classification::Classifier) answers where a request
//! goes without admitting it, e.g. to check a configuration:
//!
//! ```
//! use apf::classification::{Classifier, RequestDigest};
//! use apf::config::Config;
//!
//! let classifier = Classifier::new(&Config::builtin().validate().unwrap());
//! let lease = RequestDigest {
//!     user: "system:node:n1",
//!     groups: &["system:nodes", "system:authenticated"],
//!     verb: "update",
//!     is_resource_request: true,
//!     api_group: "coordination.k8s.io",
//!     resource: "leases",
//!     namespace: "kube-node-lease",
//!     ..RequestDigest::default()
//! };
//! let c = classifier.classify(&lease);
//! assert_eq!((c.schema.name.as_str(), c.level.name.as_str()), ("system-node-high", "node-high"));
//! assert_eq!(c.flow_distinguisher, "system:node:n1"); // one flow per node
//! ```
//!
//! ## Your own configuration, and a request that waits its turn
//!
//! [`Config`](config::Config) reads FlowSchema and PriorityLevelConfiguration
//! objects as `kubectl get -o yaml` prints them (YAML or JSON, `v1` or
//! `v1beta3`); the mandatory `exempt` and `catch-all` objects are added
//! when missing. A bad configuration is refused with every error, each
//! naming the object and the field. Here one level gets one seat, so a
//! second request waits until the first finishes; a
//! [manual clock](clock::Clock::manual) makes time-dependent code
//! testable.
//!
//! ```
//! use apf::classification::RequestDigest;
//! use apf::clock::Clock;
//! use apf::config::Config;
//! use apf::dispatcher::{Dispatcher, DispatcherOptions, Outcome};
//! use apf::work_estimate::WorkEstimate;
//! use std::time::Duration;
//!
//! let yaml = "
//! apiVersion: flowcontrol.apiserver.k8s.io/v1
//! kind: PriorityLevelConfiguration
//! metadata: {name: api}
//! spec:
//!   type: Limited
//!   limited:
//!     nominalConcurrencyShares: 5
//!     limitResponse:
//!       type: Queue
//!       queuing: {queues: 16, handSize: 4, queueLengthLimit: 10}
//! ---
//! apiVersion: flowcontrol.apiserver.k8s.io/v1
//! kind: FlowSchema
//! metadata: {name: api}
//! spec:
//!   priorityLevelConfiguration: {name: api}
//!   matchingPrecedence: 500
//!   distinguisherMethod: {type: ByUser}
//!   rules:
//!   - subjects: [{kind: Group, group: {name: system:authenticated}}]
//!     resourceRules:
//!     - {verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['*'], clusterScope: true}
//! ";
//! let config = Config::from_yaml_str(yaml).unwrap();
//! // Two seats in all: `api` (5 shares) and `catch-all` (5 shares) get one each.
//! let options = DispatcherOptions { server_concurrency_limit: 2, ..Default::default() };
//! let (clock, manual) = Clock::manual();
//! let dispatcher = Dispatcher::new(&config, options, clock).unwrap();
//!
//! let digest = |user| RequestDigest {
//!     user,
//!     groups: &["system:authenticated"],
//!     verb: "get",
//!     is_resource_request: true,
//!     resource: "pods",
//!     namespace: "default",
//!     ..RequestDigest::default()
//! };
//! let one_seat = WorkEstimate::new(1, 0, Duration::ZERO);
//! let Outcome::Execute(first) = dispatcher.start_request(&digest("alice"), one_seat, None).outcome
//! else { panic!("a free seat") };
//! let Outcome::Queued(mut second) = dispatcher.start_request(&digest("bob"), one_seat, None).outcome
//! else { panic!("the seat is taken") };
//! assert!(second.poll().is_none()); // still waiting
//!
//! manual.advance(Duration::from_millis(20));
//! first.finish(); // frees the seat: bob's request is dispatched
//! let guard = second.wait().expect("dispatched");
//! guard.finish();
//!
//! // Errors name the object and the field.
//! let bad = yaml.replace("handSize: 4", "handSize: 40");
//! let errors = Dispatcher::new(&Config::from_yaml_str(&bad).unwrap(), Default::default(), Clock::real())
//!     .unwrap_err()
//!     .to_string();
//! assert!(errors.contains("PriorityLevelConfiguration \"api\""), "{errors}");
//! assert!(errors.contains("spec.limited.limitResponse.queuing.handSize"), "{errors}");
//! ```
//!
//! ## A work queue
//!
//! [`workqueue`] is client-go's family for controllers: an item added
//! while it is queued is queued once, and an item is never processed by
//! two workers at once. A rate-limiting queue retries failures with
//! backoff:
//!
//! ```
//! use apf::clock::Clock;
//! use apf::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
//! use std::time::Duration;
//!
//! let (clock, manual) = Clock::manual();
//! let queue = RateLimitingQueue::with_config(
//!     QueueConfig::with_clock(clock.clone()).named("pods"),
//!     default_controller_rate_limiter(&clock),
//! );
//! queue.add("shop/web-0");
//! queue.add("shop/web-0"); // already queued: still one item
//! assert_eq!(queue.len(), 1);
//!
//! let key = queue.get().unwrap(); // blocks while the queue is empty
//! // Reconciling failed: retry later (5 ms, then 10 ms, 20 ms, ...).
//! queue.add_rate_limited(key);
//! queue.done(&key).unwrap();
//! assert_eq!(queue.len(), 0);
//! manual.advance(Duration::from_millis(5));
//! let key = queue.get().unwrap();
//! // Success: forget its failures, then mark it done.
//! queue.forget(&key);
//! queue.done(&key).unwrap();
//! queue.shut_down();
//! assert_eq!(queue.get(), None);
//! ```
//!
//! # Conventions
//!
//! - **Errors, not panics.** Bad input (a configuration, a workload, an
//!   option out of range) is an `Err` whose message names the object and
//!   the field; no public function panics on input. Functions that can only
//!   fail on a bug say so.
//! - **Time** comes from a [`Clock`](clock::Clock): [`Clock::real`](clock::Clock::real)
//!   in production, [`Clock::manual`](clock::Clock::manual) in tests, so
//!   queue time-outs, delays and borrowing run deterministically.
//! - **Seats** are the unit of concurrency: a request holds
//!   [`WorkEstimate::initial_seats`](work_estimate::WorkEstimate::initial_seats)
//!   while it executes and may hold final seats a little longer (Kubernetes'
//!   cost of notifying watchers of a write).
//!
//! # Modules
//!
//! | module | what for |
//! | --- | --- |
//! | [`dispatcher`] | the entry point: configuration, classification and admission |
//! | [`config`] | FlowSchema and PriorityLevelConfiguration objects: read, validate, print; the built-in configuration |
//! | [`classification`] | which schema, level and flow a request belongs to; [`RequestInfo`](classification::RequestInfo) derives a digest from a Kubernetes-style URL |
//! | [`work_estimate`] | seats per request, with Kubernetes' estimator for LIST, WATCH and writes |
//! | [`level`] | a priority level, and the guard and ticket of an admitted request |
//! | [`queueset`] | one level's fair queuing, usable on its own |
//! | [`borrowing`] | lending idle seats between levels (CurrentCL) |
//! | [`stats`] | the measuring floor: seat demand, utilization and per-schema tallies, what borrowing and metrics read |
//! | [`dealer`] | shuffle sharding: the hand of queues of a flow |
//! | [`retry_after`] | Kubernetes' `Retry-After` for rejected requests |
//! | [`rejection`] | the 429 every libapf middleware answers (Kubernetes `Status` body, `Retry-After`) |
//! | [`observe`] | `/metrics` and Kubernetes' debug dumps over HTTP, one plain function |
//! | [`uid`] | stable UIDs for objects configured without `metadata.uid` |
//! | [`metrics`] | Prometheus metrics and Kubernetes' debug dumps |
//! | [`workqueue`] | client-go's work queues and rate limiters |
//! | [`clock`] | real and manual time, timers |
//!
//! # Cargo features
//!
//! | feature | adds |
//! | --- | --- |
//! | `tower` | `apf::tower`: a tower layer that puts APF in front of any hyper or axum service |
//! | `simulator` | `apf::simulator`: the workload simulator behind `apf simulate` |
//!
//! None is on by default; the library has no CLI dependency (the `apf`
//! tool is the separate `apf-cli` crate) and no C ABI: the C library
//! (`libapf.so`, `libapf.a`, `include/apf.h`) is the repository's `capi/`
//! crates, so depending on apf builds no C library. The `testing` feature
//! exists for libapf's own tests (reference models) and is not part of the
//! API. Two items are public only for the `apf` tool and hidden from these
//! docs (`input`, bounded reading of untrusted files; the simulator's
//! number formatting); everything the C library needs is documented API
//! (for example [`level::Level::limited`], [`level::SharedRequest`]).
//! Installing for each language: `docs/install.md` in the repository.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations)]
#![warn(missing_docs)]

pub mod adaptive;
pub mod borrowing;
pub mod classification;
pub mod clock;
pub mod config;
pub mod cost;
pub mod dealer;
pub mod dispatcher;
// Bounded reading of untrusted input. Public only for the apf-cli crate,
// which reads files and clips echoed text with the library's limits; not
// part of the API.
#[doc(hidden)]
pub mod input;
pub mod level;
#[cfg(not(loom))]
pub mod metrics;
#[cfg(all(test, not(loom)))]
mod module_graph_tests;
#[cfg(not(loom))]
pub mod observe;
pub mod queueset;
pub mod rejection;
pub mod retry_after;
#[cfg(all(feature = "simulator", not(loom)))]
pub mod simulator;
pub mod stats;
// The atomics/locks shim that loom and shuttle swap out: internal, not
// API. It offers the whole set of primitives the models provide (one import
// path for any new concurrent code), so a few (UnsafeCell, spin_hint, fence,
// AtomicPtr) are unused at the moment; hence the allow.
#[allow(dead_code, unused_imports)]
pub(crate) mod sync;
#[cfg(all(feature = "tower", not(loom)))]
pub mod tower;
pub mod uid;
pub mod work_estimate;
pub mod workqueue;
