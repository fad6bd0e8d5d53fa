// Package admin is the admin HTTP API: parameter templates, tasks, group membership
// and client keys. Every change that can alter what a user is offered commits to MySQL
// first and then invalidates the cache (a group's generation or a user's version), so
// the change reaches the affected agents on their next fetch.
package admin
