// Package schedule is what a user is offered, and in what order: the per-user priority
// heap and the offer it is built from. It does no I/O.
//
// Offer builds a user's offer from the tasks targeted at the user and the user's
// groups: once tasks with their one occurrence, rotate tasks with their next occurrence
// after the cursor (the seed's formula), and the user's own waiting dispatches (retries,
// parked and expired attempts). The heap orders them by due time, then priority (higher
// first), then task key; popping a rotate entry puts its next occurrence in its place.
// The MySQL package reads a Source, the Redis package caches the heap; neither knows
// the other.
package schedule
