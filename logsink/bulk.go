package logsink

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/elastic/go-elasticsearch/v8/esutil"
)

// How the sink reads the server's answers to bulk requests: one set of rules for the
// lanes' requests (through esutil.BulkIndexer), the requests of a split, and the setup's
// probe event.

// refusal is the server's final no to a document: an item error that retrying cannot
// mend, or a bulk request refused as a whole for a reason in its documents.
type refusal struct {
	status int
	reason string // the server's words: "type: reason", or its bare message
	whole  bool   // the whole request was refused, not an item
}

// String is the refusal as a dead letter's reason and readiness detail give it.
func (r refusal) String() string {
	s := fmt.Sprintf("elasticsearch status %d: %s", r.status, r.reason)
	if r.whole {
		s += " (bulk request refused as a whole)"
	}
	return s
}

// valueInReason is what in a server's reason names one document's values: a field's
// value, a document id, a position ("[1:1755]"), each in brackets or quotes.
var valueInReason = regexp.MustCompile(`\[[^\]]*\]|'[^']*'|"[^"]*"`)

// class is the refusal with what names one document masked: two documents refused for
// the same reason have the same class ("field [at] value [2026-…] parse err" and
// "field [due_at] value [0001-…] parse err" alike).
func (r refusal) class() string {
	return fmt.Sprintf("%d %s", r.status, valueInReason.ReplaceAllString(r.reason, "[…]"))
}

// refusesEvents decides what the refusals of one bulk batch mean. When the batch
// stored none of its documents and every refusal gives one reason, the server refuses
// events as such (its mappings or its grammar cannot take them), not these documents:
// none may be dead-lettered, or the whole stream would be. A lone refusal proves that
// only while the server is not known to store events (storing: a document was stored
// since it last refused events as such). Otherwise the refused documents are at fault.
func refusesEvents(stored int, refusals []refusal, storing bool) bool {
	if stored > 0 || len(refusals) == 0 {
		return false
	}
	c := refusals[0].class()
	for _, r := range refusals[1:] {
		if r.class() != c {
			return false
		}
	}
	return len(refusals) >= 2 || !storing
}

// wholeRefusal reads the answer to a bulk request that failed with an error status: a
// 400 or 413 is a refusal of the request as a whole for a reason that lies in its
// documents (one the server cannot parse or map, a body too large), which splitting
// the request can find; any other status (401, 403, 404, 429, 5xx) is not about the
// documents.
func wholeRefusal(status int, body []byte) *refusal {
	if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
		return nil
	}
	return &refusal{status: status, reason: errorReason(body), whole: true}
}

// itemFate reads a bulk reply item for the document with _id id: stored (it answers for
// that very _id, with a 2xx status and no error), refused for good (a 4xx other than
// 429), or neither, and so worth sending again (no status, 429, 5xx, or a 2xx that does
// not confirm the document).
func itemFate(res esutil.BulkIndexerResponseItem, id string) (stored bool, refused *refusal) {
	switch st := res.Status; {
	case st >= 200 && st < 300:
		return res.DocumentID == id && res.Error.Type == "", nil
	case st == 0, st == http.StatusTooManyRequests, st >= 500:
		return false, nil
	}
	reason := res.Error.Reason
	if res.Error.Type != "" {
		reason = res.Error.Type + ": " + reason
	}
	return false, &refusal{status: res.Status, reason: reason}
}

// decodeBulkReply decodes a bulk reply to a request of sent items, and rejects one that
// cannot be a true answer to it: a top-level error (whatever the HTTP status), or a
// number of items other than the number sent (BulkIndexer pairs reply items with
// request items by position). A rejected reply answers for no item.
func decodeBulkReply(r io.Reader, sent int) (esutil.BulkIndexerResponse, error) {
	var reply struct {
		esutil.BulkIndexerResponse
		Error json.RawMessage `json:"error"`
	}
	if err := json.NewDecoder(r).Decode(&reply); err != nil {
		return reply.BulkIndexerResponse, fmt.Errorf("bulk reply is not JSON: %w", err)
	}
	if len(reply.Error) > 0 && string(reply.Error) != "null" {
		return reply.BulkIndexerResponse, fmt.Errorf("bulk reply is an error: %s", errorReason([]byte(`{"error":`+string(reply.Error)+`}`)))
	}
	if len(reply.Items) != sent {
		return reply.BulkIndexerResponse, fmt.Errorf("bulk reply has %d items for %d sent", len(reply.Items), sent)
	}
	return reply.BulkIndexerResponse, nil
}

// bulkDoc is one document of a bulk request the sink builds itself.
type bulkDoc struct {
	index, id string
	source    []byte
}

// bulkAnswer is what a bulk request got: a refusal of the whole request, no usable
// answer (err, with the status if there was one), or an answer per document.
type bulkAnswer struct {
	whole  *refusal
	err    error
	status int
	items  []docAnswer
}

// docAnswer is one document's fate: stored, refused, or (neither) worth sending again.
type docAnswer struct {
	stored  bool
	refused *refusal
}

// sendBulk indexes docs in one bulk request, each by its _id, and reads the answer as
// the lanes read theirs.
func sendBulk(ctx context.Context, api *esapi.API, docs []bulkDoc) bulkAnswer {
	var body bytes.Buffer
	for _, d := range docs {
		meta, err := json.Marshal(map[string]any{"index": map[string]string{"_index": d.index, "_id": d.id}})
		if err != nil {
			return bulkAnswer{err: err}
		}
		body.Write(meta)
		body.WriteByte('\n')
		body.Write(d.source)
		body.WriteByte('\n')
	}
	res, err := api.Bulk(bytes.NewReader(body.Bytes()), api.Bulk.WithContext(ctx))
	if err != nil {
		return bulkAnswer{err: err}
	}
	defer res.Body.Close()
	reply, err := io.ReadAll(res.Body)
	ans := bulkAnswer{status: res.StatusCode}
	switch {
	case err != nil:
		ans.err = fmt.Errorf("bulk reply: %w", err)
		return ans
	case res.StatusCode >= 300:
		if ans.whole = wholeRefusal(res.StatusCode, reply); ans.whole == nil {
			ans.err = fmt.Errorf("bulk request: status %d: %s", res.StatusCode, errorReason(reply))
		}
		return ans
	}
	blk, err := decodeBulkReply(bytes.NewReader(reply), len(docs))
	if err != nil {
		ans.err = err
		return ans
	}
	ans.items = make([]docAnswer, len(docs))
	for i, item := range blk.Items {
		for _, res := range item {
			ans.items[i].stored, ans.items[i].refused = itemFate(res, docs[i].id)
		}
	}
	return ans
}
