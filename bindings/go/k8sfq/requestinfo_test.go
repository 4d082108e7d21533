package k8sfq

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	k8srequest "k8s.io/apiserver/pkg/endpoints/request"
)

// sharedCase is one entry of tests/data/request-info-cases.json, the
// expectations every binding's path helper (libapf's apf_request_info_parse)
// is checked on.
type sharedCase struct {
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

// TestSharedRequestInfoCasesAreKubernetes runs Kubernetes' own request-info
// parser (the API server's RequestInfoFactory, as the generic API server
// configures it) on every shared case: the file's expectations are what
// Kubernetes sees, so a binding that passes them parses paths as Kubernetes
// does (empty segments, verb prefixes, unknown methods, watch values and
// metadata.name field selectors included).
func TestSharedRequestInfoCasesAreKubernetes(t *testing.T) {
	text, err := os.ReadFile("../../../tests/data/request-info-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Cases []sharedCase }
	if err := json.Unmarshal(text, &doc); err != nil {
		t.Fatal(err)
	}
	factory := &k8srequest.RequestInfoFactory{
		APIPrefixes:          sets.NewString("api", "apis"),
		GrouplessAPIPrefixes: sets.NewString("api"),
	}
	for _, c := range doc.Cases {
		// The query exactly as the client sent it: Kubernetes decodes it
		// itself (watch, field selector and the other list options).
		u := &url.URL{Path: c.Path, RawQuery: c.Query}
		// Kubernetes answers an error for a path that names a verb but no
		// resource (`/api/v1/watch`), with the request info as far as it
		// got: that is what the case expects.
		info, _ := factory.NewRequestInfo(&http.Request{Method: c.Method, URL: u})
		w := c.Want
		if info.Verb != w.Verb || info.IsResourceRequest != w.IsResourceRequest ||
			info.APIGroup != w.APIGroup || info.Resource != w.Resource ||
			info.Subresource != w.Subresource || info.Namespace != w.Namespace ||
			info.Name != w.Name || info.Path != w.Path {
			t.Errorf("%s %s query=%q: Kubernetes sees verb=%q resource=%v group=%q resource=%q subresource=%q namespace=%q name=%q path=%q; the case says %+v",
				c.Method, c.Path, c.Query, info.Verb, info.IsResourceRequest, info.APIGroup,
				info.Resource, info.Subresource, info.Namespace, info.Name, info.Path, w)
		}
	}
}
