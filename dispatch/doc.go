// Package dispatch is the heart of the server: fetch and complete (DESIGN.md sections
// 3 to 5) and the client HTTP API.
//
// Read it top to bottom: service.go is Fetch and Complete, keys.go the client keys,
// sweeper.go the lease expiry in the background, http.go the handlers.
//
// A fetch, in order: the open dispatch comes first (redo, retry or expiry); then the
// user's heap from Redis (queue.Cache, rebuilt from MySQL when stale); then, for each
// occurrence due, an atomic claim in MySQL (store.Claim) until one succeeds. MySQL holds
// every fact that must not be lost; Redis only says where to look.
package dispatch
