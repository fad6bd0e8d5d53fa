// Package taskd holds the domain of the pull-based task dispatch server: executors,
// tasks and their occurrences, dispatch events, and the error kinds every layer speaks.
//
// It imports nothing outside the standard library. The machinery lives in the
// sub-packages: dispatch (fetch and complete), queue (the per-user heap and its Redis
// cache), admin (the admin API), logsink (events to Kafka and Elasticsearch),
// internal/store (MySQL) and cmd (the binaries that wire them together).
package taskd
