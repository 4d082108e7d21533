package genericserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	flowcontrol "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	apifilters "k8s.io/apiserver/pkg/endpoints/filters"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/filters"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/libapf/apf/bindings/go/k8sfq"
)

// Example_filterChain: API Priority and Fairness on libapf in front of a
// plain net/http handler, with the filters a generic API server puts
// around it (request info, then the user from authentication, then
// WithPriorityAndFairness). In a server built on k8s.io/apiserver's
// generic API server, setting Config.FlowControl to k8sfq.NewController
// (see newServer in server_test.go) is the whole change: its
// DefaultBuildHandlerChain builds this chain itself.
func Example_filterChain() {
	// The FlowSchemas and PriorityLevelConfigurations: from the cluster in
	// a real server (kubernetes.NewForConfig(...).FlowcontrolV1() and the
	// server's shared informer factory); from a fake clientset here.
	client := fake.NewClientset(apfObjects()...)
	informerFactory := informers.NewSharedInformerFactory(client, 0)
	const serverSeats = 600 // a generic server passes MaxRequestsInFlight + MaxMutatingRequestsInFlight
	ctl := k8sfq.NewController(informerFactory, client.FlowcontrolV1(), serverSeats)

	stop := make(chan struct{})
	defer close(stop)
	informerFactory.Start(stop)
	informerFactory.WaitForCacheSync(stop)
	go func() { _ = ctl.Run(stop) }()

	app := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	longRunning := filters.BasicLongRunningRequestCheck(sets.NewString("watch"), sets.NewString("proxy"))
	estimate := func(*http.Request, string, string) fcrequest.WorkEstimate {
		return fcrequest.WorkEstimate{InitialSeats: 1}
	}
	handler := filters.WithPriorityAndFairness(app, longRunning, ctl, estimate, time.Minute)
	// Authentication's place: every request is polite-a's here.
	authenticated := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := &user.DefaultInfo{Name: "polite-a", Groups: []string{user.AllAuthenticated}}
		handler.ServeHTTP(w, r.WithContext(genericrequest.WithUser(r.Context(), u)))
	})
	infoFactory := &genericrequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	chain := apifilters.WithRequestInfo(authenticated, infoFactory)

	// The controller reads the objects asynchronously: wait until it
	// classifies polite-a's requests into the workload schema.
	waitForSchema(ctl, "workload")
	rec := httptest.NewRecorder()
	chain.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/apps/configmaps/settings", nil))
	fmt.Println(rec.Code, rec.Body.String(), rec.Header().Get(flowcontrol.ResponseHeaderMatchedFlowSchemaUID))
	// Output: 200 ok fs-workload
}

func waitForSchema(ctl utilflowcontrol.Interface, schema string) {
	digest := utilflowcontrol.RequestDigest{
		RequestInfo: &genericrequest.RequestInfo{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "configmaps", Namespace: "apps", Name: "settings"},
		User:        &user.DefaultInfo{Name: "polite-a", Groups: []string{user.AllAuthenticated}},
	}
	_ = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var got string
		ctl.Handle(context.Background(), digest,
			func(fs *flowcontrol.FlowSchema, _ *flowcontrol.PriorityLevelConfiguration, _ string) { got = fs.Name },
			func() fcrequest.WorkEstimate { return fcrequest.WorkEstimate{InitialSeats: 1} }, nil, func() {})
		return got == schema, nil
	})
}
