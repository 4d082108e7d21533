package k8sfq

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	apifilters "k8s.io/apiserver/pkg/endpoints/filters"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/filters"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
)

// apfHandler puts Kubernetes' WithPriorityAndFairness filter, driven by
// ctl, in front of inner, with the request info and user (alice) an API
// server's earlier filters would have set.
func apfHandler(inner http.Handler, ctl utilflowcontrol.Interface) http.Handler {
	infoFactory := &genericrequest.RequestInfoFactory{APIPrefixes: sets.NewString("apis", "api"), GrouplessAPIPrefixes: sets.NewString("api")}
	longRunning := filters.BasicLongRunningRequestCheck(sets.NewString("watch"), sets.NewString("proxy"))
	estimate := func(*http.Request, string, string) fcrequest.WorkEstimate {
		return fcrequest.WorkEstimate{InitialSeats: 1}
	}
	apf := filters.WithPriorityAndFairness(inner, longRunning, ctl, estimate, time.Minute)
	withUser := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(genericrequest.WithUser(r.Context(), &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}))
		apf.ServeHTTP(w, r)
	})
	return apifilters.WithRequestInfo(withUser, infoFactory)
}

func serve(h http.Handler, path string) int {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code
}

// TestFilterFloodGets429sPoliteClientsServed: with one seat, one queue of
// length one, a flood finds the seat taken and the queue full and is
// answered 429 at once; the requests admitted are served; afterwards
// polite (one at a time) clients are all served.
func TestFilterFloodGets429sPoliteClientsServed(t *testing.T) {
	for _, f := range factories {
		t.Run(f.name, func(t *testing.T) {
			s := startController(t, f.make(), 6, testObjects(1, 1, 1))
			release := make(chan struct{})
			entered := make(chan struct{})
			inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/api/v1/namespaces/default/pods/slow" {
					close(entered)
					<-release
				}
				w.WriteHeader(http.StatusOK)
			})
			h := apfHandler(inner, s.ctl)

			var wg sync.WaitGroup
			codes := make([]int, 2)
			wg.Add(2)
			go func() { defer wg.Done(); codes[0] = serve(h, "/api/v1/namespaces/default/pods/slow") }()
			<-entered
			go func() { defer wg.Done(); codes[1] = serve(h, "/api/v1/namespaces/default/pods/queued") }()
			s.waitForWaiting(t, "1")

			for i := range 20 {
				if code := serve(h, "/api/v1/namespaces/default/pods/flood"); code != http.StatusTooManyRequests {
					t.Fatalf("flood request %d: status %d, want 429", i, code)
				}
			}
			close(release)
			wg.Wait()
			if codes[0] != http.StatusOK || codes[1] != http.StatusOK {
				t.Fatalf("admitted requests: statuses %v", codes)
			}
			for i := range 10 {
				if code := serve(h, "/api/v1/namespaces/default/pods/polite"); code != http.StatusOK {
					t.Fatalf("polite request %d: status %d", i, code)
				}
			}
			if row := s.levelRow(t); row[7] != "20" {
				t.Fatalf("rejections counted by the queueset: %v", row)
			}
		})
	}
}
