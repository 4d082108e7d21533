package k8sfq

import (
	"fmt"
	"time"

	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/util/flowcontrol/debug"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	"k8s.io/klog/v2"
)

// seatSeconds formats virtual time as Kubernetes' SeatSeconds prints it.
func seatSeconds(v float64) string { return fmt.Sprintf("%.8fss", v) }

// Dump is the queueset's state in Kubernetes' debug shape: the waiting
// requests queue by queue, and the executing requests: under the queue
// they waited in, as Kubernetes lists them, or, for requests that libapf
// admitted at once without touching a queue, in
// QueuelessExecutingRequests.
func (qs *queueSet) Dump(includeRequestDetails bool) debug.QueueSetDump {
	qs.f.sync()
	d, err := qs.q.Dump()
	if err != nil {
		klog.ErrorS(err, "libapf queueset dump", "priorityLevel", qs.name)
		return debug.QueueSetDump{}
	}
	out := debug.QueueSetDump{
		Queues:       make([]debug.QueueDump, len(d.Queues)),
		Waiting:      d.Waiting,
		Executing:    d.Executing,
		SeatsInUse:   d.SeatsInUse,
		SeatsWaiting: d.SeatsWaiting,
		Dispatched:   d.Dispatched,
		Rejected:     d.RejectedQueueFull + d.RejectedTimeOut + d.RejectedCancelled + d.RejectedConcurrencyLimit,
		Timedout:     d.RejectedTimeOut,
		Cancelled:    d.RejectedCancelled,
	}
	// The dump reads R under libapf's lock: keep the gauge current too.
	metrics.SetCurrentR(qs.name, d.CurrentR)
	slot := make(map[int]int, len(d.Queues))
	for i, q := range d.Queues {
		slot[q.Index] = i
		out.Queues[i] = debug.QueueDump{
			QueueSum: debug.QueueSum{
				InitialSeatsSum: q.InitialSeatsSum,
				MaxSeatsSum:     q.MaxSeatsSum,
				TotalWorkSum:    seatSeconds(q.TotalWorkSum),
			},
			NextDispatchR:     seatSeconds(q.NextDispatchR),
			ExecutingRequests: q.Executing,
			SeatsInUse:        q.SeatsInUse,
		}
	}
	for _, w := range d.WaitingRequests {
		i, ok := slot[w.Queue]
		if !ok {
			continue
		}
		rd := debug.RequestDump{MatchedFlowSchema: qs.tags.name(w.Tag)}
		if v, ok := qs.reg.queuedDump(w.ID, includeRequestDetails); ok {
			rd = v.rd
			rd.StartTime = time.Time{}
		}
		out.Queues[i].Requests = append(out.Queues[i].Requests, rd)
	}
	qs.reg.eachRunning(includeRequestDetails, func(v requestDump) {
		if i, ok := slot[v.queue]; ok && v.waited {
			out.Queues[i].RequestsExecuting = append(out.Queues[i].RequestsExecuting, v.rd)
		} else {
			out.QueuelessExecutingRequests = append(out.QueuelessExecutingRequests, v.rd)
		}
	})
	return out
}

// requestDump is a request as Kubernetes' debug dump shows it, with where
// it waited, copied under the registry's lock (requests are reused once
// finished).
type requestDump struct {
	rd     debug.RequestDump
	waited bool
	queue  int
}

func (r *request) snapshot(includeRequestDetails bool) requestDump {
	rd := debug.RequestDump{
		MatchedFlowSchema: r.fsName,
		FlowDistinguisher: r.flowDistinguisher,
		ArriveTime:        r.arrival,
		StartTime:         r.start,
		WorkEstimate:      r.estimate,
	}
	if includeRequestDetails {
		if u, ok := genericrequest.UserFrom(r.ctx); ok {
			rd.UserName = u.GetName()
		}
		if ri, ok := genericrequest.RequestInfoFrom(r.ctx); ok {
			rd.RequestInfo = *ri
		}
	}
	return requestDump{rd: rd, waited: r.waited, queue: r.queue}
}
