// Package dispatch is the heart of the server: fetch and complete (DESIGN.md sections
// 3 to 5) and the client HTTP API.
//
// Read it top to bottom: deps.go is what the service needs (Store, Cache: interfaces
// it owns, implemented by internal/store and queue), service.go is Fetch and Complete,
// sweeper.go the lease expiry in the background, http.go the handlers. Client keys are
// package clientkey's; the rules of attempts and outcomes are the domain's (package
// taskd).
//
// A fetch, in order: the open dispatch comes first (redo, retry or expiry); then the
// user's heap from the Cache (rebuilt from MySQL when stale); then, for each occurrence
// due, an atomic claim in the Store until one succeeds. MySQL holds every fact that must
// not be lost; Redis only says where to look.
package dispatch
