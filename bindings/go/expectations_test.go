package apf

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The shared middleware expectations (tests/data/middleware-expectations.json
// at the repository root; see its comment), which the Rust tower layer and
// the Python WSGI and ASGI middlewares meet too, against Middleware and the
// ready MetricsHandler and DebugHandler.

type expectation struct {
	Status         int               `json:"status"`
	Headers        map[string]string `json:"headers"`
	AbsentHeaders  []string          `json:"absent_headers"`
	Body           *string           `json:"body"`
	BodyStartsWith *string           `json:"body_starts_with"`
}

type expectationStep struct {
	Name    string `json:"name"`
	Request *struct {
		Method, Path, User string
	} `json:"request"`
	Expect         expectation            `json:"expect"`
	Hold           *struct{ User string } `json:"hold"`
	Release        *struct{}              `json:"release"`
	AdvanceSeconds int                    `json:"advance_seconds"`
}

type expectationsDoc struct {
	ServerConcurrencyLimit uint32            `json:"server_concurrency_limit"`
	WaitLimitSeconds       int               `json:"wait_limit_seconds"`
	Config                 string            `json:"config"`
	Steps                  []expectationStep `json:"steps"`
}

var expectationGroups = []string{"tenants", "system:authenticated"}

func TestMiddlewareMeetsTheSharedExpectations(t *testing.T) {
	raw, err := os.ReadFile("../../tests/data/middleware-expectations.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc expectationsDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Steps) < 10 {
		t.Fatalf("%d steps", len(doc.Steps))
	}
	// A zero wait is a negative WaitLimit (zero is the default).
	waitLimit := time.Duration(doc.WaitLimitSeconds) * time.Second
	if waitLimit == 0 {
		waitLimit = -1
	}
	d, err := NewFromConfig([]byte(doc.Config), Options{
		ServerConcurrencyLimit: doc.ServerConcurrencyLimit,
		WaitLimit:              waitLimit,
		ManualClock:            true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	digest := func(r *http.Request) RequestDigest {
		dg := ParsePath(r.Method, r.URL.Path, r.URL.RawQuery)
		dg.User = r.Header.Get("X-Remote-User")
		dg.Groups = expectationGroups
		return dg
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux := http.NewServeMux()
	mux.Handle("/metrics", MetricsHandler(d))
	mux.Handle(DebugPathPrefix, DebugHandler(d))
	mux.Handle("/", Middleware(d, MiddlewareOptions{Digest: digest})(ok))

	release := make(chan struct{})
	var holders sync.WaitGroup
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
		holders.Wait()
	}()
	for _, step := range doc.Steps {
		switch {
		case step.Request != nil:
			req := httptest.NewRequest(step.Request.Method, step.Request.Path, nil)
			req.Header.Set("X-Remote-User", step.Request.User)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			checkExpectation(t, step.Name, rec, step.Expect)
		case step.Hold != nil:
			started := make(chan struct{})
			holders.Add(1)
			dg := ParsePath("GET", "/api/v1/pods", "")
			dg.User = step.Hold.User
			dg.Groups = expectationGroups
			go func() {
				defer holders.Done()
				res, err := d.Handle(context.Background(), dg, nil, nil, nil, func() {
					close(started)
					<-release
				})
				if err != nil || res.Outcome != Executed {
					t.Errorf("%s: %+v %v", step.Name, res, err)
					close(started)
				}
			}()
			<-started
		case step.Release != nil:
			close(release)
			holders.Wait()
			release = make(chan struct{})
		case step.AdvanceSeconds > 0:
			if err := d.AdvanceClock(time.Duration(step.AdvanceSeconds) * time.Second); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unknown step %q", step.Name)
		}
	}
}

func checkExpectation(t *testing.T, step string, rec *httptest.ResponseRecorder, want expectation) {
	t.Helper()
	body := rec.Body.String()
	if rec.Code != want.Status {
		t.Errorf("%s: status %d, want %d (body %q)", step, rec.Code, want.Status, body)
	}
	for name, value := range want.Headers {
		if got := rec.Header().Values(name); len(got) != 1 || got[0] != value {
			t.Errorf("%s: header %s %q, want %q", step, name, got, value)
		}
	}
	for _, name := range want.AbsentHeaders {
		if got := rec.Header().Values(name); len(got) != 0 {
			t.Errorf("%s: header %s %q, want none", step, name, got)
		}
	}
	if want.Body != nil && body != *want.Body {
		t.Errorf("%s: body\n%s\nwant\n%s", step, body, *want.Body)
	}
	if want.BodyStartsWith != nil && !strings.HasPrefix(body, *want.BodyStartsWith) {
		t.Errorf("%s: body %q, want it to start with %q", step, body, *want.BodyStartsWith)
	}
}
