// Package genericserver_test runs libapf's queueset factory where it is
// meant to live: inside an API server built on k8s.io/apiserver's generic
// API server (the way k8s.io/sample-apiserver is built), with Kubernetes'
// API Priority and Fairness controller, HTTP filter and debug endpoints,
// serving a resource to client-go clients over TLS on the loopback
// interface.
package genericserver_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	flowcontrol "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	apiopenapi "k8s.io/apiserver/pkg/endpoints/openapi"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/options"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/klog/v2"
	openapicommon "k8s.io/kube-openapi/pkg/common"

	"github.com/libapf/apf/bindings/go/k8sfq"
)

// The users: token -> user. "flood" and the polite ones are matched by the
// "workload" flow schema (one flow per user); "admin" is in system:masters,
// which Kubernetes' mandatory "exempt" flow schema sends to the exempt
// priority level.
var users = map[string]*user.DefaultInfo{
	"flood-token":  {Name: "flood", Groups: []string{user.AllAuthenticated}},
	"polite-a-tok": {Name: "polite-a", Groups: []string{user.AllAuthenticated}},
	"polite-b-tok": {Name: "polite-b", Groups: []string{user.AllAuthenticated}},
	"admin-token":  {Name: "admin", Groups: []string{user.AllAuthenticated, user.SystemPrivilegedGroup}},
}

// configMaps serves core/v1 ConfigMaps, read-only, from memory; every
// read takes work (a handler's time), so that a flood contends for seats.
type configMaps struct {
	work  time.Duration
	items map[string]*corev1.ConfigMap // namespace/name
	reads atomic.Int64
}

var (
	_ rest.Storage              = (*configMaps)(nil)
	_ rest.Scoper               = (*configMaps)(nil)
	_ rest.Getter               = (*configMaps)(nil)
	_ rest.Lister               = (*configMaps)(nil)
	_ rest.SingularNameProvider = (*configMaps)(nil)
)

func (s *configMaps) New() runtime.Object      { return &corev1.ConfigMap{} }
func (s *configMaps) Destroy()                 {}
func (s *configMaps) NamespaceScoped() bool    { return true }
func (s *configMaps) GetSingularName() string  { return "configmap" }
func (s *configMaps) NewList() runtime.Object  { return &corev1.ConfigMapList{} }
func (s *configMaps) busy(ctx context.Context) { s.reads.Add(1); sleepCtx(ctx, s.work) }
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (s *configMaps) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	s.busy(ctx)
	ns, _ := genericrequest.NamespaceFrom(ctx)
	if cm, ok := s.items[ns+"/"+name]; ok {
		return cm.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), name)
}

func (s *configMaps) List(ctx context.Context, _ *metainternalversion.ListOptions) (runtime.Object, error) {
	s.busy(ctx)
	ns, _ := genericrequest.NamespaceFrom(ctx)
	out := &corev1.ConfigMapList{}
	for _, cm := range s.items {
		if ns == "" || cm.Namespace == ns {
			out.Items = append(out.Items, *cm.DeepCopy())
		}
	}
	return out, nil
}

func (s *configMaps) ConvertToTable(ctx context.Context, obj runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	return rest.NewDefaultTableConvertor(corev1.Resource("configmaps")).ConvertToTable(ctx, obj, opts)
}

// apfObjects: Kubernetes' mandatory configuration (exempt, catch-all)
// and a "workload" level (5 shares against catch-all's 5, 64 queues,
// hands of 6, 4 requests a queue) that a flow schema fills with the
// non-admin users' requests, one flow per user.
func apfObjects() []runtime.Object {
	shares := int32(5)
	pl := &flowcontrol.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "workload", UID: "pl-workload"},
		Spec: flowcontrol.PriorityLevelConfigurationSpec{
			Type: flowcontrol.PriorityLevelEnablementLimited,
			Limited: &flowcontrol.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: &shares,
				LimitResponse: flowcontrol.LimitResponse{
					Type:    flowcontrol.LimitResponseTypeQueue,
					Queuing: &flowcontrol.QueuingConfiguration{Queues: 64, HandSize: 6, QueueLengthLimit: 4},
				},
			},
		},
	}
	fs := &flowcontrol.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: "workload", UID: "fs-workload"},
		Spec: flowcontrol.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrol.PriorityLevelConfigurationReference{Name: "workload"},
			MatchingPrecedence:         500,
			DistinguisherMethod:        &flowcontrol.FlowDistinguisherMethod{Type: flowcontrol.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrol.PolicyRulesWithSubjects{{
				Subjects: []flowcontrol.Subject{{Kind: flowcontrol.SubjectKindGroup, Group: &flowcontrol.GroupSubject{Name: user.AllAuthenticated}}},
				ResourceRules: []flowcontrol.ResourcePolicyRule{{
					Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
					Namespaces: []string{"*"}, ClusterScope: true,
				}},
			}},
		},
	}
	return []runtime.Object{
		pl, fs,
		bootstrap.MandatoryPriorityLevelConfigurationExempt, bootstrap.MandatoryPriorityLevelConfigurationCatchAll,
		bootstrap.MandatoryFlowSchemaExempt, bootstrap.MandatoryFlowSchemaCatchAll,
	}
}

// newServer builds and starts the API server on 127.0.0.1 (a free port),
// with APF on libapf's queuesets; it stops when ctx ends (wait on the
// returned channel). The configuration objects come from a fake
// clientset, as a server of its own would read them from its control
// plane.
func newServer(t *testing.T, ctx context.Context, store *configMaps, seats int, stock bool) (*restclient.Config, <-chan error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(scheme)

	config := genericapiserver.NewConfig(codecs)
	config.EffectiveVersion = basecompatibility.NewEffectiveVersionFromString("", "", "")
	// No OpenAPI models for the served resource (it is read-only, so
	// server-side apply never needs them): the legacy prefix is left out.
	config.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(
		func(openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition { return nil },
		apiopenapi.NewDefinitionNamer(scheme))
	config.OpenAPIV3Config.IgnorePrefixes = []string{genericapiserver.DefaultLegacyAPIPrefix}
	serving := options.NewSecureServingOptions().WithLoopback()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serving.Listener = ln
	serving.ServerCert.CertDirectory = t.TempDir()
	if err := serving.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	if err := serving.ApplyTo(&config.SecureServing, &config.LoopbackClientConfig); err != nil {
		t.Fatal(err)
	}
	tokens := make(map[string]*user.DefaultInfo, len(users))
	for tok, u := range users {
		tokens[tok] = u
	}
	config.Authentication.Authenticator = authenticatorfactory.NewFromTokens(tokens, nil)
	config.Authorization.Authorizer = authorizerfactory.NewAlwaysAllowAuthorizer()
	genericapiserver.AuthorizeClientBearerToken(config.LoopbackClientConfig, &config.Authentication, &config.Authorization)

	// API Priority and Fairness on libapf: the one line that differs from
	// a stock server (which sets utilflowcontrol.New(...) here, or lets
	// RecommendedOptions do it); the stock one runs too, as the control.
	cs := fake.NewClientset(apfObjects()...)
	informerFactory := informers.NewSharedInformerFactory(cs, 0)
	config.FlowControl = k8sfq.NewController(informerFactory, cs.FlowcontrolV1(), seats)
	if stock {
		config.FlowControl = utilflowcontrol.New(informerFactory, cs.FlowcontrolV1(), seats)
	}

	server, err := config.Complete(informerFactory).New("libapf-generic-apiserver-test", genericapiserver.NewEmptyDelegate())
	if err != nil {
		t.Fatal(err)
	}
	group := genericapiserver.NewDefaultAPIGroupInfo("", scheme, runtime.NewParameterCodec(scheme), codecs)
	group.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{"configmaps": store}
	if err := server.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, &group); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- server.PrepareRun().RunWithContext(ctx) }()

	client := restclient.CopyConfig(config.LoopbackClientConfig)
	client.BearerToken = ""
	client.Host = "https://" + ln.Addr().String()
	client.TLSClientConfig = restclient.TLSClientConfig{Insecure: true}
	client.QPS, client.Burst = -1, 0 // no client-side rate limit: the server decides
	return client, done
}

// as is the client config for the user with the token.
func as(cfg *restclient.Config, token string) *kubernetes.Clientset {
	c := restclient.CopyConfig(cfg)
	c.BearerToken = token
	return kubernetes.NewForConfigOrDie(c)
}

// get reads the test ConfigMap once, without client-go's retries on 429
// (so that every rejection is seen), and returns the HTTP status (client-go
// returns a 429 as an error without the status: read it from the error),
// or -1 if there was no HTTP answer (the context ended).
func get(ctx context.Context, c *kubernetes.Clientset) int {
	var code int
	err := c.CoreV1().RESTClient().Get().Namespace("apps").Resource("configmaps").Name("settings").
		MaxRetries(0).Do(ctx).StatusCode(&code).Error()
	switch {
	case code != 0:
		return code
	case apierrors.IsTooManyRequests(err):
		return http.StatusTooManyRequests
	case err != nil:
		if ctx.Err() == nil {
			otherErr.Store(err.Error())
		}
		return -1
	}
	return code
}

// otherErr is the last error without an HTTP answer before the end.
var otherErr atomic.Value

// tally counts HTTP statuses.
type tally struct {
	mu    sync.Mutex
	codes map[int]int
}

func (t *tally) add(code int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.codes == nil {
		t.codes = make(map[int]int)
	}
	t.codes[code]++
}

func (t *tally) get() map[int]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[int]int, len(t.codes))
	for k, v := range t.codes {
		out[k] = v
	}
	return out
}

func (t *tally) total() int {
	n := 0
	for _, v := range t.get() {
		n += v
	}
	return n
}

// metricSum adds the samples of a metric family (text exposition) whose
// labels include every one of labels.
func metricSum(text, family string, labels ...string) (float64, bool) {
	var sum float64
	found := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, family+"{") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

func fetch(ctx context.Context, c *kubernetes.Clientset, path string) (string, error) {
	body, err := c.CoreV1().RESTClient().Get().AbsPath(path).MaxRetries(0).DoRaw(ctx)
	return string(body), err
}

// TestGenericAPIServerFloodPoliteExempt: a generic API server with 4
// seats (APF on libapf's factory; the workload level's share is 2) serves
// ConfigMaps, each read taking 100 ms (a handler's time, asleep, so that
// a loaded machine's CPU does not decide the outcome). For 2 s one
// client-go user floods it from 40 goroutines (its 6 queues of 4 and 2
// seats hold 26) while two polite users read one request at a time and an
// admin (system:masters, exempt) reads from 4 goroutines. The polite users are
// all served, the flood gets Kubernetes' 429s (and some service), the
// admin is never rejected; the debug dumps and /metrics answer, and once
// the clients stop, the workload level holds no seat and no request.
func TestGenericAPIServerFloodPoliteExempt(t *testing.T) {
	// Kubernetes' own factory first, as the control for the same figures.
	t.Run("kubernetes", func(t *testing.T) { floodPoliteExempt(t, true) })
	t.Run("libapf", func(t *testing.T) { floodPoliteExempt(t, false) })
}

func floodPoliteExempt(t *testing.T, stock bool) {
	if testing.Short() {
		t.Skip("starts an API server")
	}
	// The server logs every request the flood abandons at the end.
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	defer klog.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srvCtx, stop := context.WithCancel(ctx)
	store := &configMaps{work: 100 * time.Millisecond, items: map[string]*corev1.ConfigMap{
		"apps/settings": {ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "settings"}, Data: map[string]string{"mode": "fair"}},
	}}
	cfg, done := newServer(t, srvCtx, store, 4, stock)
	defer func() {
		stop()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("server: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the server did not stop within 30 s")
		}
	}()
	admin := as(cfg, "admin-token")

	// Ready, and the APF controller has digested the configuration: a
	// polite read is classified into the workload schema (the response's
	// X-Kubernetes-PF-FlowSchema-UID header names it).
	polite := []*kubernetes.Clientset{as(cfg, "polite-a-tok"), as(cfg, "polite-b-tok")}
	deadline := time.Now().Add(60 * time.Second)
	for {
		res := polite[0].CoreV1().RESTClient().Get().Namespace("apps").Resource("configmaps").Name("settings").MaxRetries(0).Do(ctx)
		var code int
		res.StatusCode(&code)
		if code == http.StatusOK && pfSchema(ctx, cfg, "polite-a-tok") == "fs-workload" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never served a classified request (last status %d)", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cm, err := polite[1].CoreV1().ConfigMaps("apps").Get(ctx, "settings", metav1.GetOptions{})
	if err != nil || cm.Data["mode"] != "fair" {
		t.Fatalf("typed client read: %v, %+v", err, cm)
	}

	var flood, politeCodes, exempt tally
	floodCtx, endFlood := context.WithTimeout(ctx, 2*time.Second)
	defer endFlood()
	var wg sync.WaitGroup
	run := func(n int, c *kubernetes.Clientset, into *tally, pause time.Duration) {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for floodCtx.Err() == nil {
					if code := get(floodCtx, c); code != -1 {
						into.add(code) // -1: cut off by the end of the flood
					}
					if pause > 0 {
						sleepCtx(floodCtx, pause)
					}
				}
			}()
		}
	}
	run(40, as(cfg, "flood-token"), &flood, 0)
	time.Sleep(200 * time.Millisecond) // the flood fills its queues first
	for _, c := range polite {
		run(1, c, &politeCodes, 50*time.Millisecond)
	}
	run(4, admin, &exempt, 0)

	// While the flood runs: the debug dumps and /metrics answer.
	time.Sleep(500 * time.Millisecond)
	for _, path := range []string{
		"/debug/api_priority_and_fairness/dump_priority_levels",
		"/debug/api_priority_and_fairness/dump_queues",
		"/debug/api_priority_and_fairness/dump_requests",
	} {
		body, err := fetch(ctx, admin, path)
		if err != nil || !strings.Contains(body, "workload") {
			t.Errorf("%s: %v\n%.600s", path, err, body)
		}
		if strings.HasSuffix(path, "levels") {
			t.Logf("during the flood: %q", dumpRow(body, "workload"))
		}
	}
	wg.Wait()

	f, p, e := flood.get(), politeCodes.get(), exempt.get()
	t.Logf("flood %v, polite %v, exempt %v, reads served %d; %v", f, p, e, store.reads.Load(), otherErr.Load())
	if f[http.StatusTooManyRequests] == 0 || f[http.StatusOK] == 0 {
		t.Errorf("flood: %v; want both 429s and 200s", f)
	}
	if e := otherErr.Load(); e != nil {
		t.Errorf("a request failed without an HTTP answer: %v", e)
	}
	if p[http.StatusOK] < 4 || p[http.StatusOK] != politeCodes.total() {
		t.Errorf("polite users: %v; want every request served (at least 4)", p)
	}
	if e[http.StatusOK] == 0 || e[http.StatusOK] != exempt.total() {
		t.Errorf("exempt user: %v; want every request served", e)
	}

	// Afterwards: the workload level holds no seat and no request.
	var metricsText string
	deadline = time.Now().Add(10 * time.Second)
	for {
		metricsText, err = fetch(ctx, admin, "/metrics")
		if err != nil {
			t.Fatalf("/metrics: %v", err)
		}
		seats, ok := metricSum(metricsText, "apiserver_flowcontrol_current_executing_seats", `priority_level="workload"`)
		waiting, _ := metricSum(metricsText, "apiserver_flowcontrol_current_inqueue_requests", `priority_level="workload"`)
		executing, _ := metricSum(metricsText, "apiserver_flowcontrol_current_executing_requests", `priority_level="workload"`)
		if ok && seats == 0 && waiting == 0 && executing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workload level after the clients stopped: seats %v (found %v), waiting %v, executing %v", seats, ok, waiting, executing)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rejected, _ := metricSum(metricsText, "apiserver_flowcontrol_rejected_requests_total", `priority_level="workload"`, `flow_schema="workload"`)
	if int(rejected) < f[http.StatusTooManyRequests] {
		t.Errorf("apiserver_flowcontrol_rejected_requests_total for workload is %v; the flood saw %d 429s", rejected, f[http.StatusTooManyRequests])
	}
	if r, _ := metricSum(metricsText, "apiserver_flowcontrol_rejected_requests_total", `priority_level="exempt"`); r != 0 {
		t.Errorf("exempt level rejected %v requests", r)
	}
	levels, err := fetch(ctx, admin, "/debug/api_priority_and_fairness/dump_priority_levels")
	if err != nil {
		t.Fatal(err)
	}
	if row := dumpRow(levels, "workload"); len(row) < 6 || row[4] != "0" || row[5] != "0" {
		t.Errorf("dump_priority_levels after the clients stopped: %q (want 0 waiting and 0 executing)\n%s", row, levels)
	}
}

// pfSchema is the flow schema UID the server's APF filter reports for one
// request of the user with the token.
func pfSchema(ctx context.Context, cfg *restclient.Config, token string) string {
	c := restclient.CopyConfig(cfg)
	c.BearerToken = token
	hc, err := restclient.HTTPClientFor(c)
	if err != nil {
		return ""
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/api/v1/namespaces/apps/configmaps/settings", nil)
	if err != nil {
		return ""
	}
	res, err := hc.Do(req)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.Header.Get(flowcontrol.ResponseHeaderMatchedFlowSchemaUID)
}

// dumpRow is the named level's row of dump_priority_levels (comma
// separated, trimmed).
func dumpRow(dump, level string) []string {
	for _, line := range strings.Split(dump, "\n") {
		cells := strings.Split(line, ",")
		if len(cells) > 0 && strings.TrimSpace(cells[0]) == level {
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			return cells
		}
	}
	return nil
}

var _ = fmt.Sprint
