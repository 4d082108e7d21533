package apf

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

const tightAlice = `{priority_level="tight",flow_schema="alice"}`

// sample is the value of the exposition's sample `name` + `labels`
// (-1 if there is none).
func sample(t testing.TB, text, name, labels string) float64 {
	t.Helper()
	key := "apiserver_flowcontrol_" + name + labels + " "
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	return -1
}

// tableOf splits a dump into its header and rows of trimmed cells.
func tableOf(t testing.TB, dump string) (header []string, rows [][]string) {
	t.Helper()
	split := func(line string) []string {
		cells := strings.Split(line, ",")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		return cells
	}
	lines := strings.Split(strings.TrimSuffix(dump, "\n"), "\n")
	header = split(lines[0])
	for _, line := range lines[1:] {
		row := split(line)
		if len(row) != len(header) {
			t.Fatalf("row %q has %d cells, header %d", line, len(row), len(header))
		}
		rows = append(rows, row)
	}
	return header, rows
}

func get(t testing.TB, srv *httptest.Server, path string) (*http.Response, string) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// holdTight fills level tight's two seats with alice's requests and queues
// one more; release lets them all end (and waits for them).
func holdTight(t *testing.T, d *Dispatcher) (release func()) {
	t.Helper()
	gate := make(chan struct{})
	running := make(chan struct{}, levelSeats)
	queued := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for i := 0; i < levelSeats+1; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := d.Handle(context.Background(), podGet("alice"), nil, nil,
				func(inQueue bool) {
					if inQueue {
						queued <- struct{}{}
					}
				},
				func() {
					running <- struct{}{}
					<-gate
				})
			if err != nil {
				t.Errorf("Handle: %v", err)
			}
		}()
	}
	<-running
	<-running
	<-queued
	return func() {
		close(gate)
		wg.Wait()
	}
}

func TestMetricsTextFollowsRequests(t *testing.T) {
	d := newTestDispatcher(t, Options{ManualClock: true})
	text, err := d.MetricsText()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(text, "# EOF\n") {
		t.Fatalf("no # EOF at the end:\n%s", text)
	}
	if got := sample(t, text, "dispatched_requests_total", tightAlice); got != 0 {
		t.Fatalf("dispatched before any request: %v", got)
	}
	_, err = d.Handle(context.Background(), podGet("alice"), nil, nil, nil, func() {
		inside, err := d.MetricsText()
		if err != nil {
			t.Error(err)
			return
		}
		if got := sample(t, inside, "current_executing_requests", tightAlice); got != 1 {
			t.Errorf("executing while running: %v", got)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	text, err = d.MetricsText()
	if err != nil {
		t.Fatal(err)
	}
	if got := sample(t, text, "dispatched_requests_total", tightAlice); got != 1 {
		t.Fatalf("dispatched: %v", got)
	}
	if got := sample(t, text, "current_executing_requests", tightAlice); got != 0 {
		t.Fatalf("executing after: %v", got)
	}
}

func TestLongTextsAreReadWholeInOneCall(t *testing.T) {
	d, err := NewBuiltin(Options{ManualClock: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	text, err := d.MetricsText()
	if err != nil {
		t.Fatal(err)
	}
	if len(text) <= 4096 || !strings.HasSuffix(text, "# EOF\n") || strings.Contains(text, "\x00") {
		t.Fatalf("%d bytes, ends %q", len(text), text[max(0, len(text)-20):])
	}
	again, err := d.MetricsText()
	if err != nil || again != text {
		t.Fatalf("a second read differs (err %v)", err)
	}
}

func TestMetricsHandlerServesOpenMetrics(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	mux := http.NewServeMux()
	mux.Handle("/metrics", MetricsHandler(d))
	mux.Handle("/", Middleware(d, MiddlewareOptions{Digest: userDigest})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "ok")
		})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/namespaces/default/pods/web-0", nil)
	req.Header.Set("X-User", "alice")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	resp, body := get(t, srv, "/metrics")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != MetricsContentType() ||
		!strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("Content-Type %q", ct)
	}
	if !strings.HasSuffix(body, "# EOF\n") {
		t.Fatalf("body does not end with # EOF")
	}
	if got := sample(t, body, "dispatched_requests_total", tightAlice); got != 1 {
		t.Fatalf("dispatched: %v", got)
	}
}

func TestDebugHandlerServesKubernetesDumps(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	mux := http.NewServeMux()
	mux.Handle(DebugPathPrefix, DebugHandler(d))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	release := holdTight(t, d)
	defer release()

	resp, body := get(t, srv, DumpPriorityLevelsPath)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	header, rows := tableOf(t, body)
	if strings.Join(header, ",") != "PriorityLevelName,ActiveQueues,IsIdle,IsQuiescing,WaitingRequests,"+
		"ExecutingRequests,DispatchedRequests,RejectedRequests,TimedoutRequests,CancelledRequests" {
		t.Fatalf("header %q", header)
	}
	var tight []string
	for _, r := range rows {
		if r[0] == "tight" {
			tight = r
		}
	}
	if strings.Join(tight, ",") != "tight,1,false,false,1,2,2,0,0,0" {
		t.Fatalf("tight row %q in\n%s", tight, body)
	}

	_, body = get(t, srv, DumpQueuesPath)
	header, rows = tableOf(t, body)
	if header[0] != "PriorityLevelName" || header[len(header)-1] != "TotalWorkSum" || len(rows) == 0 {
		t.Fatalf("queues dump:\n%s", body)
	}

	_, body = get(t, srv, DumpRequestsPath)
	header, rows = tableOf(t, body)
	if len(header) != 10 || header[len(header)-1] != "StartTime" || len(rows) != 1 || rows[0][0] != "tight" {
		t.Fatalf("requests dump:\n%s", body)
	}
	for _, query := range []string{"?includeRequestDetails=", "?other=1"} {
		_, body = get(t, srv, DumpRequestsPath+query)
		if header, _ = tableOf(t, body); len(header) != 10 {
			t.Fatalf("%s: details without asking:\n%s", query, body)
		}
	}
	_, body = get(t, srv, DumpRequestsPath+"?includeRequestDetails=1")
	header, rows = tableOf(t, body)
	if len(header) != 18 || header[10] != "UserName" || rows[0][10] != "alice" ||
		rows[0][12] != "/api/v1/namespaces/default/pods/web-0" {
		t.Fatalf("detailed requests dump:\n%s", body)
	}

	if resp, _ := get(t, srv, DebugPathPrefix+"dump_everything"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown dump: %d", resp.StatusCode)
	}
}

func TestDumpMethods(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	release := holdTight(t, d)
	defer release()
	plain, err := d.DumpRequests(false)
	if err != nil {
		t.Fatal(err)
	}
	detailed, err := d.DumpRequests(true)
	if err != nil {
		t.Fatal(err)
	}
	plainHeader, plainRows := tableOf(t, plain)
	detailedHeader, detailedRows := tableOf(t, detailed)
	if len(plainHeader) != 10 || len(detailedHeader) != 18 || len(plainRows) != 1 || len(detailedRows) != 1 {
		t.Fatalf("plain:\n%s\ndetailed:\n%s", plain, detailed)
	}
	levels, err := d.DumpPriorityLevels()
	if err != nil || !strings.HasPrefix(levels, "PriorityLevelName, ActiveQueues,") {
		t.Fatalf("%v\n%s", err, levels)
	}
	queues, err := d.DumpQueues()
	if err != nil || !strings.HasPrefix(queues, "PriorityLevelName, Index,") {
		t.Fatalf("%v\n%s", err, queues)
	}
}

func TestClosedDispatcherAnswers503(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	mux := http.NewServeMux()
	mux.Handle("/metrics", MetricsHandler(d))
	mux.Handle(DebugPathPrefix, DebugHandler(d))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/metrics", DumpPriorityLevelsPath, DumpQueuesPath, DumpRequestsPath} {
		if resp, _ := get(t, srv, p); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s: %d", p, resp.StatusCode)
		}
	}
	if _, err := d.MetricsText(); !errors.Is(err, ErrClosed) {
		t.Fatalf("MetricsText after Close: %v", err)
	}
	if _, err := d.DumpRequests(true); !errors.Is(err, ErrClosed) {
		t.Fatalf("DumpRequests after Close: %v", err)
	}
}

func TestScrapesRaceRequests(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	var wg sync.WaitGroup
	var handled atomic.Int64
	stop := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := d.Handle(context.Background(), podGet("alice"), nil, nil, nil, func() {}); err != nil {
					t.Error(err)
					return
				}
				handled.Add(1)
			}
		}()
	}
	var scrapers sync.WaitGroup
	for i := 0; i < 2; i++ {
		scrapers.Add(1)
		go func() {
			defer scrapers.Done()
			for j := 0; j < 50; j++ {
				text, err := d.MetricsText()
				if err != nil || !strings.HasSuffix(text, "# EOF\n") {
					t.Errorf("scrape: %v", err)
					return
				}
				if got := sample(t, text, "current_executing_requests", tightAlice); got > levelSeats {
					t.Errorf("executing %v > %d seats", got, levelSeats)
				}
				if _, err := d.DumpRequests(true); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	scrapers.Wait()
	// On a loaded machine the scrapers may finish before the workers ran.
	for handled.Load() < 100 && !t.Failed() {
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	text, err := d.MetricsText()
	if err != nil {
		t.Fatal(err)
	}
	if got := sample(t, text, "current_executing_requests", tightAlice); got != 0 {
		t.Fatalf("executing at the end: %v", got)
	}
	if got := sample(t, text, "dispatched_requests_total", tightAlice); got < 1 {
		t.Fatalf("dispatched: %v", got)
	}
}
