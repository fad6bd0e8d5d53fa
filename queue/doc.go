// Package queue is the Redis side of the fetch path: each user's heap (package
// schedule) cached as a sorted set, the user's open dispatch, and the user's client key
// set.
//
// The sorted set's order is the heap's order: score = due time, member = an encoding
// of priority and task key (member.go) whose byte order breaks ties the same way. A
// rotate task stands in the set once, with its next occurrence; popping it advances it
// by its period, so a task rotating every minute costs one member, not 1440. Every
// multi-step Redis operation is one Lua script over keys that share the user's hash
// tag. What a heap is built from comes through the Loader interface, which the MySQL
// package implements; this package does not import it.
package queue
