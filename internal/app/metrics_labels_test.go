package app_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Anyone can send a request with any method to any path; /metrics must not grow with
// what they choose. Every label of every series comes from a closed set: an unknown
// method is "other", an unknown path "unmatched".
func TestMetricsLabelsAreAClosedSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	scrape := func() string {
		resp, err := e.client.Get(e.urls[0] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	before := len(scrape())
	for i := range 50 {
		method := "M" + strings.Repeat("X", 2000) + string(rune('A'+i%26)) + strings.Repeat("Y", i)
		for _, path := range []string{"/v1/fetch", "/v1/admin/tasks", "/no/such/" + strings.Repeat("p", i), "/console/"} {
			req, err := http.NewRequest(method, e.urls[0]+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	after := scrape()
	if strings.Contains(after, "XXXX") || strings.Contains(after, "pppp") {
		t.Fatal("/metrics holds a method or path a request chose")
	}
	if !strings.Contains(after, `method="other"`) {
		t.Error(`/metrics has no method="other" series for the unknown methods`)
	}
	// The requests add a handful of series (a route, "other", a status), not 200.
	if grown := len(after) - before; grown > 40_000 {
		t.Errorf("/metrics grew by %d bytes for 200 requests with made-up methods and paths", grown)
	}
}

// A reply that carries a client key is kept by no cache, and no reply is sniffed as
// anything but JSON.
func TestKeyRepliesAreNotStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	req, _ := http.NewRequest("POST", e.urls[0]+"/v1/admin/clients/42/keys", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 || resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("key issue: %d, Cache-Control %q, X-Content-Type-Options %q", resp.StatusCode,
			resp.Header.Get("Cache-Control"), resp.Header.Get("X-Content-Type-Options"))
	}
}
