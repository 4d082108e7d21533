package k8sfq

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	flowcontrol "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	"k8s.io/apiserver/pkg/authentication/user"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/mux"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
)

// factories are the two queueset factories every controller-level test
// runs with: Kubernetes' own (the control) and libapf's.
var factories = []struct {
	name string
	make func() fq.QueueSetFactory
}{
	{"kubernetes", func() fq.QueueSetFactory { return queueset.NewQueueSetFactory(eventclock.Real{}) }},
	{"libapf", func() fq.QueueSetFactory { return NewFactory() }},
}

var registerMetrics sync.Once

// testLevel is the limited priority level the tests drive, "test-pl"
// matched by flow schema "test-fs" for user "alice" (flows by namespace);
// the server's 6 seats give it a nominal limit of 1 seat (shares 1
// of the 6 it shares with the mandatory catch-all level's 5).
func testObjects(queues, handSize, queueLengthLimit int32) []runtime.Object {
	one := int32(1)
	pl := &flowcontrol.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "test-pl", UID: "pl-uid"},
		Spec: flowcontrol.PriorityLevelConfigurationSpec{
			Type: flowcontrol.PriorityLevelEnablementLimited,
			Limited: &flowcontrol.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: &one,
				LimitResponse: flowcontrol.LimitResponse{
					Type: flowcontrol.LimitResponseTypeQueue,
					Queuing: &flowcontrol.QueuingConfiguration{
						Queues: queues, HandSize: handSize, QueueLengthLimit: queueLengthLimit,
					},
				},
			},
		},
	}
	fs := &flowcontrol.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: "test-fs", UID: "fs-uid"},
		Spec: flowcontrol.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrol.PriorityLevelConfigurationReference{Name: "test-pl"},
			MatchingPrecedence:         100,
			DistinguisherMethod:        &flowcontrol.FlowDistinguisherMethod{Type: flowcontrol.FlowDistinguisherMethodByNamespaceType},
			Rules: []flowcontrol.PolicyRulesWithSubjects{{
				Subjects: []flowcontrol.Subject{{Kind: flowcontrol.SubjectKindUser, User: &flowcontrol.UserSubject{Name: "alice"}}},
				ResourceRules: []flowcontrol.ResourcePolicyRule{{
					Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
					Namespaces: []string{"*"}, ClusterScope: true,
				}},
				NonResourceRules: []flowcontrol.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
			}},
		},
	}
	return []runtime.Object{
		pl, fs,
		bootstrap.MandatoryPriorityLevelConfigurationExempt, bootstrap.MandatoryPriorityLevelConfigurationCatchAll,
		bootstrap.MandatoryFlowSchemaExempt, bootstrap.MandatoryFlowSchemaCatchAll,
	}
}

// apfServer is Kubernetes' APF controller built with a given factory, fed
// through a fake clientset and informers, with its debug endpoints.
type apfServer struct {
	ctl utilflowcontrol.Interface
	mux *mux.PathRecorderMux
}

func startController(tb testing.TB, factory fq.QueueSetFactory, serverLimit int, objs []runtime.Object) *apfServer {
	tb.Helper()
	registerMetrics.Do(metrics.Register)
	client := fake.NewClientset(objs...)
	informerFactory := informers.NewSharedInformerFactory(client, 0)
	ctl := utilflowcontrol.NewTestable(utilflowcontrol.TestableConfig{
		Name:                   "libapf-test",
		Clock:                  clock.RealClock{},
		AsFieldManager:         utilflowcontrol.ConfigConsumerAsFieldManager,
		FoundToDangling:        func(found bool) bool { return !found },
		InformerFactory:        informerFactory,
		FlowcontrolClient:      client.FlowcontrolV1(),
		ServerConcurrencyLimit: serverLimit,
		ReqsGaugeVec:           metrics.PriorityLevelConcurrencyGaugeVec,
		ExecSeatsGaugeVec:      metrics.PriorityLevelExecutionSeatsGaugeVec,
		QueueSetFactory:        factory,
	})
	stop := make(chan struct{})
	informerFactory.Start(stop)
	informerFactory.WaitForCacheSync(stop)
	done := make(chan error, 1)
	go func() { done <- ctl.Run(stop) }()
	tb.Cleanup(func() {
		close(stop)
		if err := <-done; err != nil {
			tb.Errorf("controller: %v", err)
		}
	})
	s := &apfServer{ctl: ctl, mux: mux.NewPathRecorderMux("test")}
	ctl.Install(s.mux)
	// The controller digests the informers' objects asynchronously: wait
	// (bounded) until a request of alice's is classified into test-fs.
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) {
			var fsName string
			s.ctl.Handle(context.Background(), alice("get"), func(fs *flowcontrol.FlowSchema, _ *flowcontrol.PriorityLevelConfiguration, _ string) {
				fsName = fs.Name
			}, oneSeat, nil, func() {})
			return fsName == "test-fs", nil
		})
	if err != nil {
		tb.Fatalf("the controller never digested the test objects: %v", err)
	}
	return s
}

func oneSeat() fcrequest.WorkEstimate { return fcrequest.WorkEstimate{InitialSeats: 1} }

// noNote is a classification note that ignores it (the controller calls
// its note function unconditionally).
func noNote(*flowcontrol.FlowSchema, *flowcontrol.PriorityLevelConfiguration, string) {}

func alice(verb string) utilflowcontrol.RequestDigest { return aliceIn(verb, "default") }

func aliceIn(verb, namespace string) utilflowcontrol.RequestDigest {
	return utilflowcontrol.RequestDigest{
		RequestInfo: &genericrequest.RequestInfo{
			IsResourceRequest: true, Verb: verb, APIVersion: "v1",
			Resource: "pods", Namespace: namespace, Name: "p",
		},
		User: &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}},
	}
}

// levelRow is test-pl's row of the controller's dump_priority_levels:
// name, active queues, idle, quiescing, waiting, executing, dispatched,
// rejected, timed out, cancelled.
func (s *apfServer) levelRow(tb testing.TB) []string {
	tb.Helper()
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/api_priority_and_fairness/dump_priority_levels", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		f := strings.Split(line, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		if len(f) >= 10 && f[0] == "test-pl" {
			return f
		}
	}
	tb.Fatalf("no test-pl row in:\n%s", rec.Body.String())
	return nil
}

// waitForWaiting waits (bounded) until test-pl has n waiting requests.
func (s *apfServer) waitForWaiting(tb testing.TB, n string) {
	tb.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return s.levelRow(tb)[4] == n, nil })
	if err != nil {
		tb.Fatalf("test-pl never had %s waiting: %v", n, s.levelRow(tb))
	}
}

// TestControllerClassifiesQueuesAndDispatches drives Kubernetes' own APF
// controller end to end: classification by the informers' objects, one
// seat executing, a second request waiting in a queue (seen through the
// controller's debug dump) and dispatched when the first finishes, and a
// third whose context is cancelled while it waits.
func TestControllerClassifiesQueuesAndDispatches(t *testing.T) {
	for _, f := range factories {
		t.Run(f.name, func(t *testing.T) {
			s := startController(t, f.make(), 6, testObjects(4, 2, 10))

			release := make(chan struct{})
			firstRunning := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.ctl.Handle(context.Background(), alice("get"), noNote, oneSeat, nil, func() {
					close(firstRunning)
					<-release
				})
			}()
			<-firstRunning

			var pl string
			queued := make(chan bool, 2)
			secondRan := make(chan struct{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.ctl.Handle(context.Background(), alice("list"),
					func(_ *flowcontrol.FlowSchema, p *flowcontrol.PriorityLevelConfiguration, _ string) { pl = p.Name },
					oneSeat, func(in bool) { queued <- in }, func() { close(secondRan) })
			}()
			s.waitForWaiting(t, "1")
			if !<-queued {
				t.Fatal("queue note: want true on entering the queue")
			}

			ctx, cancel := context.WithCancel(context.Background())
			thirdDone := make(chan bool)
			go func() {
				ran := false
				s.ctl.Handle(ctx, alice("watch"), noNote, oneSeat, nil, func() { ran = true })
				thirdDone <- ran
			}()
			s.waitForWaiting(t, "2")
			cancel()
			if <-thirdDone {
				t.Fatal("a request whose context was cancelled while queued ran")
			}

			close(release)
			<-secondRan
			wg.Wait()
			if pl != "test-pl" {
				t.Fatalf("classified into priority level %q", pl)
			}
			row := s.levelRow(t)
			// waiting 0, executing 0, idle, one rejection (the cancelled one).
			if row[2] != "true" || row[4] != "0" || row[5] != "0" || row[7] != "1" {
				t.Fatalf("test-pl after the run: %v", row)
			}
		})
	}
}
