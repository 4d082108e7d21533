package k8sfq

import (
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	"k8s.io/client-go/informers"
	flowcontrolclient "k8s.io/client-go/kubernetes/typed/flowcontrol/v1"
)

// NewController is Kubernetes' API Priority and Fairness controller
// (utilflowcontrol.New, with the same arguments and settings) on libapf's
// queuesets: the drop-in for a generic API server's Config.FlowControl.
// Everything but the queuesets (classification, borrowing, the config
// consumer and its status writes, the filter's interface, the debug
// endpoints, the metrics) is Kubernetes' own.
func NewController(informerFactory informers.SharedInformerFactory, flowcontrolClient flowcontrolclient.FlowcontrolV1Interface,
	serverConcurrencyLimit int) utilflowcontrol.Interface {
	return utilflowcontrol.NewTestable(utilflowcontrol.TestableConfig{
		Name:                   "Controller",
		Clock:                  eventclock.Real{},
		AsFieldManager:         utilflowcontrol.ConfigConsumerAsFieldManager,
		FoundToDangling:        func(found bool) bool { return !found },
		InformerFactory:        informerFactory,
		FlowcontrolClient:      flowcontrolClient,
		ServerConcurrencyLimit: serverConcurrencyLimit,
		ReqsGaugeVec:           metrics.PriorityLevelConcurrencyGaugeVec,
		ExecSeatsGaugeVec:      metrics.PriorityLevelExecutionSeatsGaugeVec,
		QueueSetFactory:        NewFactory(),
	})
}
