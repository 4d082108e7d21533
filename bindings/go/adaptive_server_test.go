package apf

// The adaptive limit in a real server (issue 26's real-server check): the
// net/http middleware on loopback in front of a backend that slows down
// under concurrency, as tests/end_to_end/adaptive_tower.rs does with the tower layer.
// The backend serves adaptiveK requests at full speed; a request that
// arrives with n > K in flight (itself included) sleeps base × n / K, so
// its service time is a deterministic function of the concurrency the
// middleware admitted. The same closed-loop load runs behind a fixed limit
// twice too high (2K seats for the level) and behind the adaptive limit.
// The assertions are on what the backend saw: its in-flight count at each
// arrival and the service time that count gives (its p99 against the
// unloaded base), which a slow machine cannot change; the measured latency
// only on its median, with wide margins (the fixed run's at least 1.5 × the
// unloaded one, the adaptive run's at most 0.85 × the fixed run's; its p99
// is logged: one stall of a loaded machine moves it). A behaviour check,
// not a timing benchmark. About 7 s; skipped with -short.

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	adaptiveK       = 8
	adaptiveBase    = 40 * time.Millisecond
	adaptiveClients = 4 * adaptiveK
	// ceil(16 × 95 / 100) = 16 seats for the level: twice too high.
	adaptiveFixedTooHigh = 2 * adaptiveK
)

// One level for the clients (95 of 100 shares, lending nothing, a queue
// long enough that nobody is rejected), beside catch-all's 5.
const adaptiveServerConfig = `
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: backend, uid: uid-backend}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 95
    lendablePercent: 0
    limitResponse: {type: Queue, queuing: {queues: 1, handSize: 1, queueLengthLimit: 1000}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: clients, uid: uid-clients}
spec:
  priorityLevelConfiguration: {name: backend}
  matchingPrecedence: 100
  rules:
  - subjects: [{kind: User, user: {name: client}}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
`

type backendSample struct {
	arrived  time.Time
	inFlight int
	// service is the time the backend meant: base × max(1, n / K).
	service time.Duration
	latency time.Duration
}

type slowBackend struct {
	inFlight atomic.Int64
	mu       sync.Mutex
	samples  []backendSample
}

func (b *slowBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	n := int(b.inFlight.Add(1))
	service := time.Duration(float64(adaptiveBase) * math.Max(1, float64(n)/adaptiveK))
	time.Sleep(service)
	b.inFlight.Add(-1)
	latency := time.Since(arrived)
	b.mu.Lock()
	b.samples = append(b.samples, backendSample{arrived, n, service, latency})
	b.mu.Unlock()
	_, _ = io.WriteString(w, "ok\n")
}

type measured struct {
	perSecond                float64
	p50, p99, serviceP99     time.Duration
	inFlightP99, inFlightMax int
	total                    uint32
}

func quantileIndex(n int, q float64) int {
	return int(math.Round(float64(n-1) * q))
}

func runAdaptiveServer(t *testing.T, opts Options, clients int, run, warmUp time.Duration) measured {
	t.Helper()
	d, err := NewFromConfig([]byte(adaptiveServerConfig), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	backend := &slowBackend{}
	digest := func(*http.Request) RequestDigest {
		return RequestDigest{User: "client", Groups: []string{"system:authenticated"}, Verb: "get", Path: "/work"}
	}
	srv := httptest.NewServer(Middleware(d, MiddlewareOptions{Digest: digest})(backend))
	defer srv.Close()
	transport := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}

	start := time.Now()
	end := start.Add(run)
	var wrong atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				resp, err := client.Get(srv.URL + "/work")
				if err != nil {
					wrong.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					wrong.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if w := wrong.Load(); w != 0 {
		t.Fatalf("%d requests not served (the queue holds them all)", w)
	}
	var lat, service []time.Duration
	var inFlight []int
	backend.mu.Lock()
	for _, s := range backend.samples {
		if !s.arrived.Before(start.Add(warmUp)) {
			lat = append(lat, s.latency)
			service = append(service, s.service)
			inFlight = append(inFlight, s.inFlight)
		}
	}
	backend.mu.Unlock()
	if len(lat) < 20 {
		t.Fatalf("%d samples", len(lat))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	sort.Ints(inFlight)
	sort.Slice(service, func(i, j int) bool { return service[i] < service[j] })
	m := measured{
		perSecond:   float64(len(lat)) / (run - warmUp).Seconds(),
		p50:         lat[quantileIndex(len(lat), 0.5)],
		p99:         lat[quantileIndex(len(lat), 0.99)],
		serviceP99:  service[quantileIndex(len(service), 0.99)],
		inFlightP99: inFlight[quantileIndex(len(inFlight), 0.99)],
		inFlightMax: inFlight[len(inFlight)-1],
		total:       opts.ServerConcurrencyLimit,
	}
	if s, err := d.AdaptiveState(); err == nil && s.Enabled {
		m.total = s.Limit
	}
	return m
}

func TestAdaptiveKeepsTheBackendNearItsCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("a real-time load of about 6 s")
	}
	fixed := Options{ServerConcurrencyLimit: adaptiveFixedTooHigh}
	unloaded := runAdaptiveServer(t, fixed, 1, time.Second, 0)
	tooHigh := runAdaptiveServer(t, fixed, adaptiveClients, 1500*time.Millisecond, 300*time.Millisecond)
	adaptive := runAdaptiveServer(t, Options{
		ServerConcurrencyLimit: adaptiveFixedTooHigh,
		Adaptive: &AdaptiveOptions{
			MinLimit:         2,
			UpdateInterval:   100 * time.Millisecond,
			MinWindowSamples: 8,
			ProbeSamples:     20,
		},
	}, adaptiveClients, 3500*time.Millisecond, 2000*time.Millisecond)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	t.Log("| run | served /s | latency p50 | p99 | service time p99 (backend's model) | backend in flight p99 | max | total at the end |")
	for _, r := range []struct {
		name string
		m    measured
	}{{"unloaded (1 client)", unloaded}, {"fixed 16 (2× too high)", tooHigh}, {"adaptive", adaptive}} {
		t.Logf("| %s | %.0f | %.1f ms | %.1f ms | %.1f ms | %d | %d | %d |", r.name, r.m.perSecond,
			ms(r.m.p50), ms(r.m.p99), ms(r.m.serviceP99), r.m.inFlightP99, r.m.inFlightMax, r.m.total)
	}
	ratio := func(a, b time.Duration) float64 { return float64(a) / float64(b) }
	if unloaded.inFlightMax != 1 {
		t.Fatalf("unloaded: %+v", unloaded)
	}
	// The fixed limit lets 2K requests into the backend: twice the
	// unloaded time.
	if tooHigh.inFlightMax != 2*adaptiveK || tooHigh.inFlightP99 != 2*adaptiveK ||
		tooHigh.serviceP99 != 2*adaptiveBase || ratio(tooHigh.p50, unloaded.p50) < 1.5 {
		t.Fatalf("fixed too high: %+v (unloaded %+v)", tooHigh, unloaded)
	}
	// Adaptive keeps 99% of the arrivals at or under 1.5 K in flight (a
	// service time of at most 1.5 × base) and never reaches 2K; its median
	// latency stays well under the fixed limit's; and it keeps serving (at
	// least 30% of the fixed limit's throughput, the backend's whole: about
	// 100% on a quiet machine, less on a saturated CPU, whose scheduling
	// delays read as congestion).
	if adaptive.inFlightP99 > adaptiveK+adaptiveK/2 || adaptive.inFlightMax >= 2*adaptiveK ||
		float64(adaptive.serviceP99) > 1.5*float64(adaptiveBase) ||
		ratio(adaptive.p50, tooHigh.p50) > 0.85 || adaptive.perSecond < 0.3*tooHigh.perSecond {
		t.Fatalf("adaptive: %+v (fixed %+v, unloaded %+v)", adaptive, tooHigh, unloaded)
	}
}
