package apf_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	apf "github.com/libapf/apf/bindings/go"
)

func ExampleDispatcher_Handle() {
	d, err := apf.NewBuiltin(apf.Options{ServerConcurrencyLimit: 600})
	if err != nil {
		panic(err)
	}
	defer d.Close()

	digest := apf.RequestDigest{
		User:              "alice",
		Groups:            []string{"system:authenticated"},
		IsResourceRequest: true,
		Verb:              "list",
		Resource:          "pods",
		Namespace:         "default",
		Path:              "/api/v1/namespaces/default/pods",
	}
	res, err := d.Handle(context.Background(), digest,
		func(c apf.Classification) { fmt.Println("classified:", c.FlowSchema, "->", c.PriorityLevel) },
		func() apf.WorkEstimate { return apf.WorkEstimate{InitialSeats: 1} },
		func(inQueue bool) { fmt.Println("in queue:", inQueue) },
		func() { fmt.Println("serving") },
	)
	if err != nil {
		panic(err)
	}
	fmt.Println("outcome:", res.Outcome)
	// Output:
	// classified: global-default -> global-default
	// serving
	// outcome: executed
}

func ExampleMiddleware() {
	d, err := apf.NewBuiltin(apf.Options{})
	if err != nil {
		panic(err)
	}
	defer d.Close()

	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "pods")
	})
	handler := apf.Middleware(d, apf.MiddlewareOptions{
		// A real server puts its authenticated user here.
		Digest: func(r *http.Request) apf.RequestDigest {
			dg := apf.ParsePath(r.Method, r.URL.Path, r.URL.RawQuery)
			dg.User, dg.Groups = "alice", []string{"system:authenticated"}
			return dg
		},
	})(api)

	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/pods", nil))
	fmt.Println(rec.Code, rec.Body.String() == "pods\n")
	// Output:
	// 200 true
}
