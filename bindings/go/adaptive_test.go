package apf

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAdaptiveOffByDefault(t *testing.T) {
	d := newTestDispatcher(t, Options{ManualClock: true})
	s, err := d.AdaptiveState()
	if err != nil {
		t.Fatal(err)
	}
	if s != (AdaptiveState{}) {
		t.Fatalf("fixed limit: %+v", s)
	}
	text, err := d.MetricsText()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, "adaptive_") {
		t.Fatal("adaptive series without the adaptive limit")
	}
}

func TestAdaptiveOptionsReachLibapf(t *testing.T) {
	d := newTestDispatcher(t, Options{ManualClock: true, Adaptive: &AdaptiveOptions{ProbeLimit: 5}})
	s, err := d.AdaptiveState()
	if err != nil {
		t.Fatal(err)
	}
	// It starts with a probe at the caller's ProbeLimit.
	if !s.Enabled || !s.Probing || s.Limit != 5 || s.MinLatency != 0 {
		t.Fatalf("%+v", s)
	}
	// The defaults apply to the zero fields: a probe at the default 3.
	d = newTestDispatcher(t, Options{ManualClock: true, Adaptive: &AdaptiveOptions{}})
	if s, _ = d.AdaptiveState(); s.Limit != 3 {
		t.Fatalf("%+v", s)
	}
}

func TestAdaptiveBadOptionsAreRefusedByName(t *testing.T) {
	for field, a := range map[string]AdaptiveOptions{
		"gain":               {Gain: 9},
		"max_limit":          {MinLimit: 20, MaxLimit: 10},
		"update_interval_ns": {UpdateInterval: time.Millisecond},
		"probe_timeout_ns":   {ProbeTimeout: -time.Second},
		"smoothing_percent":  {SmoothingPercent: 101},
	} {
		_, err := NewFromConfig([]byte(testConfig), Options{Adaptive: &a})
		if !errors.Is(err, StatusInvalidParameter) || !strings.Contains(err.Error(), "apf_adaptive_options."+field) {
			t.Errorf("%s: %v", field, err)
		}
	}
}

// metricValue is the value of the unlabelled series name in an exposition.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no %s in\n%s", name, text)
	return 0
}

// Under load through the middleware on the real clock, the probe measures
// the handler's latency and the total leaves the probe for the gradient's
// range, as /metrics shows.
func TestAdaptiveLimitMovesInMetrics(t *testing.T) {
	a := &AdaptiveOptions{
		MinLimit:         8,
		UpdateInterval:   20 * time.Millisecond,
		MinWindowSamples: 4,
		ProbeSamples:     10,
	}
	d := newTestDispatcher(t, Options{ServerConcurrencyLimit: 100, Adaptive: a})
	h := Middleware(d, MiddlewareOptions{Digest: userDigest})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", MetricsHandler(d))
	mux.Handle("/", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	before, err := d.AdaptiveState()
	if err != nil || !before.Probing || before.Limit != 3 {
		t.Fatalf("%+v %v", before, err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/pods", nil)
				req.Header.Set("X-User", "alice")
				resp, err := srv.Client().Do(req)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	var s AdaptiveState
	for time.Now().Before(deadline) {
		s, _ = d.AdaptiveState()
		if s.Probes >= 1 && !s.Probing && s.MinLatency > 0 && s.Updates >= 5 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	if s.MinLatency < 2*time.Millisecond || s.Updates < 5 {
		t.Fatalf("the probe never measured: %+v", s)
	}
	if metricValue(t, text, "apiserver_flowcontrol_adaptive_min_latency_seconds") <= 0.002 {
		t.Fatalf("min latency in\n%s", text)
	}
	// Out of the probe, the total is the gradient's, at least MinLimit
	// (unless a new probe began meanwhile).
	limit := metricValue(t, text, "apiserver_flowcontrol_adaptive_server_concurrency_limit")
	probing := metricValue(t, text, "apiserver_flowcontrol_adaptive_probing")
	if probing == 0 && limit < 8 || probing == 1 && limit != 3 {
		t.Fatalf("limit %v probing %v\n%s", limit, probing, text)
	}
	if metricValue(t, text, "apiserver_flowcontrol_adaptive_probes_total") < 1 {
		t.Fatal(text)
	}
}
