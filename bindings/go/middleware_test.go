package apf

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

func userDigest(r *http.Request) RequestDigest {
	d := ParsePath(r.Method, r.URL.Path, r.URL.RawQuery)
	d.User = r.Header.Get("X-User")
	return d
}

func TestMiddlewareServesAndSetsHeaders(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	var seen RequestDigest
	h := Middleware(d, MiddlewareOptions{Digest: func(r *http.Request) RequestDigest {
		seen = userDigest(r)
		return seen
	}})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/namespaces/default/pods/web-0", nil)
	req.Header.Set("X-User", "alice")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get(FlowSchemaUIDHeader); got != "uid-fs-alice" {
		t.Fatalf("flow schema header %q", got)
	}
	if got := resp.Header.Get(PriorityLevelUIDHeader); got != "uid-pl-tight" {
		t.Fatalf("priority level header %q", got)
	}
	if seen.Verb != "get" || seen.Resource != "pods" || seen.Name != "web-0" || !seen.IsResourceRequest {
		t.Fatalf("digest %+v", seen)
	}
}

func TestMiddlewareAnswers429WithRetryAfter(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	release := make(chan struct{})
	var inHandler atomic.Int32
	h := Middleware(d, MiddlewareOptions{
		Digest: userDigest,
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler.Add(1)
		<-release
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func() (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/pods", nil)
		req.Header.Set("X-User", "bob")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			return nil, nil
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, body
	}
	var wg sync.WaitGroup
	for i := 0; i < levelSeats; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, _ := get(); resp != nil && resp.StatusCode != http.StatusOK {
				t.Errorf("holder got %d", resp.StatusCode)
			}
		}()
	}
	eventually(t, "handlers running", func() bool { return inHandler.Load() == levelSeats })
	resp, lastBody := get()
	close(release)
	wg.Wait()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("%d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if ct := resp.Header.Get("Content-Type"); ct != RejectionContentType {
		t.Fatalf("Content-Type %q", ct)
	}
	var status struct {
		Kind, Reason string
		Code         int
		Details      struct {
			Causes            []struct{ Reason string }
			RetryAfterSeconds int
		}
	}
	if err := json.Unmarshal(lastBody, &status); err != nil {
		t.Fatalf("body %q: %v", lastBody, err)
	}
	if status.Kind != "Status" || status.Reason != "TooManyRequests" || status.Code != 429 ||
		status.Details.RetryAfterSeconds != 1 || len(status.Details.Causes) != 1 ||
		status.Details.Causes[0].Reason != ConcurrencyLimit.String() {
		t.Fatalf("body %s", lastBody)
	}
	if resp.Header.Get(PriorityLevelUIDHeader) != "uid-pl-strict" {
		t.Fatalf("rejected responses carry the headers too: %v", resp.Header)
	}
}

func TestMiddlewareDefaultRetryAfterAndQueuedClientGone(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	h := hold(t, d, "alice", levelSeats)
	defer h.stop(t)
	ran := false
	mw := Middleware(d, MiddlewareOptions{Digest: userDigest})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		ran = true
	}))
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil).WithContext(ctx)
	req.Header.Set("X-User", "alice")
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		mw.ServeHTTP(rec, req)
		close(done)
	}()
	eventually(t, "queued", func() bool { return levelStat(t, d, "tight", "waiting") == 1 })
	cancel() // the client went away
	<-done
	if ran || rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("ran %v, %d, Retry-After %q", ran, rec.Code, rec.Header().Get("Retry-After"))
	}
}

func TestMiddlewarePanicFinishesAndPropagates(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	mw := Middleware(d, MiddlewareOptions{Digest: userDigest})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	for i := 0; i < 2*levelSeats; i++ {
		func() {
			defer func() {
				if r := recover(); r != http.ErrAbortHandler {
					t.Fatalf("recovered %v", r)
				}
			}()
			req := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
			req.Header.Set("X-User", "bob")
			mw.ServeHTTP(httptest.NewRecorder(), req)
		}()
	}
	if got := levelStat(t, d, "strict", "seats_in_use"); got != 0 {
		t.Fatalf("seats leaked: %d", got)
	}
}

func TestMiddlewareLongRunningBypasses(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	h := hold(t, d, "bob", levelSeats)
	defer h.stop(t)
	mw := Middleware(d, MiddlewareOptions{
		Digest:      userDigest,
		LongRunning: func(r *http.Request) bool { return r.URL.Query().Get("watch") == "true" },
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	req := httptest.NewRequest(http.MethodGet, "/api/v1/pods?watch=true", nil)
	req.Header.Set("X-User", "bob")
	rec := httptest.NewRecorder()
	mw.ServeHTTP(rec, req)
	if rec.Code != http.StatusTeapot || rec.Header().Get(FlowSchemaUIDHeader) != "" {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
}

func TestMiddlewareWorkEstimateAndAnonymousDefault(t *testing.T) {
	d := newTestDispatcher(t, Options{ServerConcurrencyLimit: 50})
	var held int64
	mw := Middleware(d, MiddlewareOptions{
		WorkEstimate: func(*http.Request) WorkEstimate { return WorkEstimate{InitialSeats: 3} },
	})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		held = levelStat(t, d, "catch-all", "seats_in_use")
	}))
	rec := httptest.NewRecorder()
	mw.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	// Anonymous users land in catch-all (ceil(50*5/25) = 10 seats); the
	// request holds the 3 seats it asked for (no per-request cap).
	if rec.Code != http.StatusOK || held != 3 {
		t.Fatalf("%d, held %d", rec.Code, held)
	}
}

func TestParsePath(t *testing.T) {
	cases := []struct {
		method, path, query string
		want                RequestDigest
	}{
		{"GET", "/api/v1/namespaces/ns/pods/p", "", RequestDigest{IsResourceRequest: true, Verb: "get", Namespace: "ns", Resource: "pods", Name: "p"}},
		{"GET", "/api/v1/namespaces/ns/pods", "", RequestDigest{IsResourceRequest: true, Verb: "list", Namespace: "ns", Resource: "pods"}},
		{"GET", "/api/v1/namespaces/ns/pods", "watch=true", RequestDigest{IsResourceRequest: true, Verb: "watch", Namespace: "ns", Resource: "pods"}},
		{"GET", "/api/v1/pods", "", RequestDigest{IsResourceRequest: true, Verb: "list", Resource: "pods"}},
		{"POST", "/apis/apps/v1/namespaces/ns/deployments", "", RequestDigest{IsResourceRequest: true, Verb: "create", APIGroup: "apps", Namespace: "ns", Resource: "deployments"}},
		{"PUT", "/apis/apps/v1/namespaces/ns/deployments/d/scale", "", RequestDigest{IsResourceRequest: true, Verb: "update", APIGroup: "apps", Namespace: "ns", Resource: "deployments", Name: "d", Subresource: "scale"}},
		{"PATCH", "/api/v1/nodes/n1/status", "", RequestDigest{IsResourceRequest: true, Verb: "patch", Resource: "nodes", Name: "n1", Subresource: "status"}},
		{"DELETE", "/api/v1/namespaces/ns/pods", "", RequestDigest{IsResourceRequest: true, Verb: "deletecollection", Namespace: "ns", Resource: "pods"}},
		{"DELETE", "/api/v1/namespaces/ns", "", RequestDigest{IsResourceRequest: true, Verb: "delete", Namespace: "ns", Resource: "namespaces", Name: "ns"}},
		{"PUT", "/api/v1/namespaces/ns/finalize", "", RequestDigest{IsResourceRequest: true, Verb: "update", Namespace: "ns", Resource: "namespaces", Name: "ns", Subresource: "finalize"}},
		{"GET", "/apis/apps/v1", "", RequestDigest{Verb: "get"}},
		{"GET", "/healthz", "", RequestDigest{Verb: "get"}},
		{"POST", "/", "", RequestDigest{Verb: "post"}},
	}
	for _, c := range cases {
		got := ParsePath(c.method, c.path, c.query)
		c.want.Path = c.path
		if got.User != "" || got.Groups != nil {
			t.Errorf("%s %s: user set", c.method, c.path)
		}
		got.Groups = nil
		if !equalDigest(got, c.want) {
			t.Errorf("%s %s: got %+v, want %+v", c.method, c.path, got, c.want)
		}
	}
}

func equalDigest(a, b RequestDigest) bool {
	a.Groups, b.Groups = nil, nil
	return a.User == b.User && a.IsResourceRequest == b.IsResourceRequest && a.Verb == b.Verb &&
		a.APIGroup == b.APIGroup && a.Resource == b.Resource && a.Subresource == b.Subresource &&
		a.Namespace == b.Namespace && a.Name == b.Name && a.Path == b.Path
}

// TestParsePathSharedCases checks ParsePath against the expectations every
// binding's request-to-digest helper shares with libapf's own
// (apf::classification::RequestInfo in Rust).
func TestParsePathSharedCases(t *testing.T) {
	text, err := os.ReadFile("../../tests/data/request-info-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			Method, Path, Query string
			Want                struct {
				Verb              string `json:"verb"`
				IsResourceRequest bool   `json:"is_resource_request"`
				APIGroup          string `json:"api_group"`
				Resource          string `json:"resource"`
				Subresource       string `json:"subresource"`
				Namespace         string `json:"namespace"`
				Name              string `json:"name"`
				Path              string `json:"path"`
			}
		}
	}
	if err := json.Unmarshal(text, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 70 {
		t.Fatalf("only %d cases", len(doc.Cases))
	}
	for _, c := range doc.Cases {
		w := c.Want
		want := RequestDigest{Verb: w.Verb, IsResourceRequest: w.IsResourceRequest, APIGroup: w.APIGroup,
			Resource: w.Resource, Subresource: w.Subresource, Namespace: w.Namespace, Name: w.Name, Path: w.Path}
		if got := ParsePath(c.Method, c.Path, c.Query); !equalDigest(got, want) {
			t.Errorf("%s %s query=%q: got %+v, want %+v", c.Method, c.Path, c.Query, got, want)
		}
	}
}
