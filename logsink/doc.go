// Package logsink carries taskd's dispatch events from MySQL to Elasticsearch through
// Kafka, at least once, with idempotent ids: nothing is lost, and nothing appears twice
// in the index, even when Kafka or Elasticsearch is down for minutes or a process is
// killed at any moment.
//
// # The path of an event
//
// The dispatch path writes each event (a taskd.Event as JSON) to the event_outbox table
// in the same transaction as the state change it describes, so an event exists if and
// only if its change committed.
//
// A Relay (run inside dispatchd when DISPATCH_KAFKA_BROKERS is set) reads the outbox in
// id order and produces the events to Kafka with acks from all in-sync replicas, keyed
// by uid. It deletes rows only after Kafka acknowledged them; while Kafka is down it
// retries with backoff and the outbox grows (fetch and complete go on: they only write
// MySQL). Several server processes may run a Relay: a MySQL advisory lock, held on a
// dedicated connection, makes one of them the relay while the others stand by.
//
// A Sink (cmd/logsink) consumes the topic in a consumer group and bulk-indexes the
// events with esutil.BulkIndexer into daily indices prefix-YYYY.MM.DD, chosen by the
// event's own time, with the event id as the document _id: a replayed event overwrites
// its own document in its own index. Every bulk item's result is checked: 429 and 5xx
// (and requests that got no answer at all) are retried with backoff until they succeed;
// other client errors, such as a mapping conflict, cannot succeed and go to the
// dead-letter topic with the reason, as do messages that are not valid events. A bulk
// request the server refuses as a whole for a reason in its documents (400 or 413) is
// split in halves, and its halves again, to find the documents at fault (split.go):
// one bad document never stalls the pipeline. But when every document of a batch is
// refused for one reason, the server or the index template is at fault, not the
// documents: none is dead-lettered, readiness says es_incompatible, and the events wait
// in Kafka (refusesEvents decides, for items and splits alike).
// Per partition, offsets are committed only up to the lowest message not yet indexed or
// dead-lettered, so a crash replays but never skips.
//
// # Why daily indices and not a data stream
//
// A data stream only accepts op_type create and its _id is unique only within one
// backing index: a replay after a rollover would index a second copy. Daily indices
// named by the event time send every delivery of an event to the same index, where
// index-by-_id overwrites. Retention is an ILM policy that deletes each daily index
// after DISPATCH_ES_RETENTION_DAYS; the template and policy live in
// deploy/elasticsearch and are installed, idempotently, at every logsink start, where
// the server supports them (see esSetup: a server without ILM gets no retention, and a
// warning saying so). The template is proven with a real event indexed into a scratch
// index made from it; a server that refuses the event gets a plainer mapping.
package logsink
