// Package queue is the per-user priority heap: what a user is offered, in what order,
// and its cache in Redis.
//
// The pure part (heap.go, offer.go) builds a user's offer from the tasks targeted at
// the user and the user's groups: once tasks with their one occurrence, rotate tasks
// with their next occurrence after the cursor (the seed's formula), ordered by due time,
// then priority (higher first), then task key. It does no I/O.
//
// The Redis part (cache.go, keys.go, scripts.go) keeps each user's heap as a sorted set
// whose order is the heap's order: score = due time, member = an encoding of priority
// and task key whose byte order breaks ties the same way. A rotate task stands in the
// set once, with its next occurrence; popping it advances it by its period, so a task
// rotating every minute costs one member, not 1440. Every multi-step Redis operation is
// one Lua script over keys that share the user's hash tag.
package queue
