// Package api holds the OpenAPI 3.1 document of the server's whole HTTP API (client,
// admin and operations routes), as the HTTP contract API.md states it, and serves it.
//
// The document lives in openapi.json next to this file and is embedded in the binary:
// edit it together with any change to a route, a field or a status code, and run this
// package's tests, which check it against the contract.
package api

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"strconv"
)

// Document is the OpenAPI 3.1 document, JSON encoded. Callers must not modify it.
//
//go:embed openapi.json
var Document []byte

// Handler serves Document as application/json, for GET and HEAD (GET /openapi.json).
// Other methods get 405 with the API's error shape.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{
				"code": "method_not_allowed", "message": r.Method + " is not allowed on " + r.URL.Path}})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(Document)))
		w.Header().Set("Cache-Control", "no-cache")
		if r.Method == http.MethodHead {
			return
		}
		w.Write(Document)
	})
}
