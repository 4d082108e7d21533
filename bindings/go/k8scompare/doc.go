// Package k8scompare benchmarks libapf (through the Go binding) side by
// side with Kubernetes' own API Priority and Fairness queueset from
// k8s.io/apiserver, on the same workloads. It is a separate module so that
// the binding itself does not depend on Kubernetes; it holds only tests
// and benchmarks (run them with ../run-compare.sh).
package k8scompare
