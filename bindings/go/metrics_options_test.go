package apf

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMetricsTextWithPrefixAndConstantLabels(t *testing.T) {
	d := newTestDispatcher(t, Options{ManualClock: true})
	plain, err := d.MetricsText()
	if err != nil {
		t.Fatal(err)
	}
	same, err := d.MetricsTextWith(MetricsOptions{})
	if err != nil || same != plain {
		t.Fatalf("default options differ from MetricsText (%v)", err)
	}
	o := MetricsOptions{
		Prefix:      "shop",
		ConstLabels: []MetricsLabel{{"dispatcher", "public"}, {"region", `e"u`}},
	}
	text, err := d.MetricsTextWith(o)
	if err != nil {
		t.Fatal(err)
	}
	want := `shop_apiserver_flowcontrol_dispatched_requests_total{dispatcher="public",region="e\"u",priority_level="tight",flow_schema="alice"} 0`
	if !strings.Contains(text, want+"\n") {
		t.Fatalf("no %s in\n%s", want, text)
	}
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if line == "# EOF" {
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE ")
		if !strings.HasPrefix(name, "shop_") {
			t.Fatalf("no prefix: %s", line)
		}
	}

	rec := httptest.NewRecorder()
	MetricsHandlerWith(d, o).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("handler: %d\n%s", rec.Code, rec.Body.String())
	}
}

func TestMetricsTextWithRefusesBadOptionsNamingThem(t *testing.T) {
	d := newTestDispatcher(t, Options{ManualClock: true})
	for _, c := range []struct {
		o      MetricsOptions
		status Status
		names  string
	}{
		{MetricsOptions{Prefix: "9lives"}, StatusInvalidParameter, "prefix"},
		{MetricsOptions{ConstLabels: []MetricsLabel{{"le", "x"}}}, StatusInvalidParameter, `"le"`},
		{MetricsOptions{ConstLabels: []MetricsLabel{{"a", "1"}, {"a", "2"}}}, StatusInvalidParameter, "twice"},
		{MetricsOptions{ConstLabels: []MetricsLabel{{"zone", "\xff"}}}, StatusInvalidUTF8, "const_labels[0].value"},
		{MetricsOptions{ConstLabels: make([]MetricsLabel, 65)}, StatusInvalidParameter, "const_labels_len"},
	} {
		_, err := d.MetricsTextWith(c.o)
		var e *Error
		if !errors.As(err, &e) || e.Status != c.status || !strings.Contains(e.Message, c.names) {
			t.Errorf("%+v: %v, want %v naming %s", c.o, err, c.status, c.names)
		}
	}
	rec := httptest.NewRecorder()
	MetricsHandlerWith(d, MetricsOptions{Prefix: "-"}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), "prefix") {
		t.Fatalf("handler with bad options: %d %s", rec.Code, rec.Body.String())
	}
	d.Close()
	if _, err := d.MetricsTextWith(MetricsOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}
