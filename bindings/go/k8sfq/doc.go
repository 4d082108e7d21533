// Package k8sfq puts libapf behind k8s.io/apiserver's own fair-queuing
// interfaces: Factory implements fairqueuing.QueueSetFactory, so an API
// server built on k8s.io/apiserver (an aggregated API server, a
// Kubernetes-style control plane) can hand it to its API Priority and
// Fairness controller and keep everything else (classification,
// borrowing, the HTTP filter, the debug endpoints) as it is.
//
// Each priority level's queueset is a libapf queueset (bindings/go's
// QueueSet): the controller's flow hash, work estimate and context decide
// where a request waits and when it runs. The metric gauges Kubernetes
// passes in are fed as Kubernetes' own queueset feeds them; see
// docs/k8s-queueset-factory.md for what differs.
//
// It is a module of its own so that the plain Go binding keeps no
// Kubernetes dependency.
package k8sfq
