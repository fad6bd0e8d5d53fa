// Package esfake is an in-process stand-in for the parts of Elasticsearch the logsink
// uses, for tests: the _bulk endpoint (NDJSON in, per-item results out, as Elasticsearch
// answers them), index templates, ILM policies and the root info endpoint. Every answer
// carries the X-Elastic-Product header, without which go-elasticsearch refuses a server.
//
// Documents are kept by index and _id, so a test can check the indexed set of ids for
// equality with what it sent and find any id indexed into two indices. Faults are
// injected per item (any status, e.g. 429 or a 400 mapping error; or a lie about it),
// per request (e.g. the next n bulk requests answer 503, a top-level error under 200,
// or an HTML 502 from a proxy) and for the whole server (down: connections are cut
// without an answer).
//
// An index is created by its first write, from the index template whose pattern matches
// its name (the highest priority wins), and keeps that template's field mappings: a
// document whose mapped value the server cannot take is refused as Elasticsearch
// refuses it (a keyword longer than 32766 bytes, a date its date grammar cannot parse).
// DELETE /<index> deletes an index and its documents.
//
// It can also be another server that speaks the API: one without ILM, one that refuses
// template settings it does not know, one whose setup calls fail for a while, one that
// does not send X-Elastic-Product (OpenSearch, Elasticsearch before 7.14), one with
// another date grammar, one that refuses a bulk request as a whole for one document.
package esfake

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// Item is one bulk operation as the fake received it, for fault injection.
type Item struct {
	Action string // index, create, delete, update
	Index  string
	ID     string
	Source []byte
	// Attempt counts the bulk operations on this _id so far, this one included.
	Attempt int
}

// Doc is one stored document.
type Doc struct {
	Index   string
	ID      string
	Source  json.RawMessage
	Version int64
	// Seq orders first indexing: the n-th distinct document stored has Seq n.
	Seq int64
}

// Server is the fake. Create it with New.
type Server struct {
	srv *httptest.Server

	mu           sync.Mutex
	docs         map[string]map[string]*Doc // _id -> _index -> doc
	seq          int64
	attempts     map[string]int
	templates    map[string]json.RawMessage
	policies     map[string]json.RawMessage
	indices      map[string]map[string]field // index -> its field mappings (nil: none)
	itemFault    func(Item) int
	replyFault   func(Item) ReplyFault
	failRequests int
	requestFault RequestFault
	down         bool

	noProduct   bool
	missing     map[string]int // first path segment (_ilm) -> status of every call
	refusedKeys []string       // template keys answered with 400 unknown setting/field
	failSetup   int            // the next failSetup template and policy calls fail ...
	setupStatus int            // ... with this status
	setupCalls  []string       // "PUT _ilm/policy/x 200", in order

	dates         DateGrammar
	wholeRequests bool // refuse a bulk request as a whole for its first refused document
}

// field is the mapping of one field: its type and, for a date, its format ("" for the
// server's default).
type field struct {
	Type   string `json:"type"`
	Format string `json:"format"`
}

// New starts a fake on a local port; it is closed when t ends.
func New(t testing.TB) *Server {
	s := &Server{
		docs:      map[string]map[string]*Doc{},
		attempts:  map[string]int{},
		templates: map[string]json.RawMessage{},
		policies:  map[string]json.RawMessage{},
		indices:   map[string]map[string]field{},
		missing:   map[string]int{},
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the fake's base address, for DISPATCH_ES_URLS.
func (s *Server) URL() string { return s.srv.URL }

// SetDown makes the server cut every connection without answering (true) or answer
// again (false).
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// FailRequests answers the next n bulk requests with status (e.g. 503) and an
// Elasticsearch error body, indexing nothing.
func (s *Server) FailRequests(n, status int) {
	s.FailRequestsWith(n, RequestFault{Status: status, ContentType: "application/json", Body: errorBody(status, errorType(status), "injected request failure")})
}

// RequestFault is a whole answer to a bulk request that stores nothing.
type RequestFault struct {
	Status      int
	ContentType string
	Body        string
}

var (
	// TopLevelError is a 200 whose body is an error, not a bulk reply: no items.
	TopLevelError = RequestFault{Status: http.StatusOK, ContentType: "application/json",
		Body: errorBody(http.StatusOK, "illegal_state_exception", "injected top-level error under 200")}
	// ProxyBadGateway is what a proxy in front of the server says when the server
	// does not answer: 502 with an HTML page.
	ProxyBadGateway = RequestFault{Status: http.StatusBadGateway, ContentType: "text/html",
		Body: "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>\n"}
)

// FailRequestsWith answers the next n bulk requests with f, indexing nothing.
func (s *Server) FailRequestsWith(n int, f RequestFault) {
	s.mu.Lock()
	s.failRequests, s.requestFault = n, f
	s.mu.Unlock()
}

// WithoutProductHeader makes the server answer without X-Elastic-Product, as
// OpenSearch and Elasticsearch before 7.14 do.
func (s *Server) WithoutProductHeader() {
	s.mu.Lock()
	s.noProduct = true
	s.mu.Unlock()
}

// WithoutEndpoint makes every call under /api (like "_ilm" or "_index_template")
// answer status, as a server without that API does: 404, 405, or 400 with
// Elasticsearch's "no handler found for uri".
func (s *Server) WithoutEndpoint(api string, status int) {
	s.mu.Lock()
	s.missing[api] = status
	s.mu.Unlock()
}

// RefuseTemplateKeys makes the server answer 400 to an index template that holds any
// of keys, as a top-level field (like _meta) or a setting under template.settings
// (like index.lifecycle.name), as a server that does not know them does.
func (s *Server) RefuseTemplateKeys(keys ...string) {
	s.mu.Lock()
	s.refusedKeys = keys
	s.mu.Unlock()
}

// FailSetup answers the next n template and policy calls with status (e.g. 503).
func (s *Server) FailSetup(n, status int) {
	s.mu.Lock()
	s.failSetup, s.setupStatus = n, status
	s.mu.Unlock()
}

// SetupCalls lists the template and policy calls received, in order, each as
// "METHOD path status".
func (s *Server) SetupCalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.setupCalls...)
}

// DateGrammar is what a server's date type parses.
type DateGrammar uint8

const (
	// ElasticsearchDates is Elasticsearch's default date format whatever format a
	// mapping names: RFC 3339 strings (strict_date_optional_time) and epoch
	// milliseconds. A value it cannot parse fails its item with 400.
	ElasticsearchDates DateGrammar = iota
	// RFC3339Dates is a server that does not know Elasticsearch's format grammar: it
	// takes a template whose date fields name a format, but then refuses every value of
	// such a field ("field [at] value [...] parse err: time format is
	// [strict_date_optional_time||epoch_millis]"); a date field without a format parses
	// RFC 3339.
	RFC3339Dates
	// EpochMillisDates is a server whose date type takes only numbers (epoch
	// milliseconds), whatever the format.
	EpochMillisDates
)

// SetDateGrammar sets what the date fields of indices parse.
func (s *Server) SetDateGrammar(g DateGrammar) {
	s.mu.Lock()
	s.dates = g
	s.mu.Unlock()
}

// RefuseWholeRequests makes the server answer a bulk request that holds a document it
// cannot take with 400 and a top-level error in its own words ({"error":"field [at]
// value [...] parse err: ..."}), storing none of the request, as some servers that
// speak the API do, instead of failing that document's item. With RFC3339Dates and a
// template whose date fields name a format, this is the server of the measured run
// that indexed nothing.
func (s *Server) RefuseWholeRequests() {
	s.mu.Lock()
	s.wholeRequests = true
	s.mu.Unlock()
}

// Indices lists the indices that exist, sorted.
func (s *Server) Indices() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.indices))
	for name := range s.indices {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Mapping returns the type of each mapped field of an index, as the index was created.
func (s *Server) Mapping(index string) (map[string]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fields, ok := s.indices[index]
	out := map[string]string{}
	for name, f := range fields {
		out[name] = f.Type
	}
	return out, ok
}

// SetItemFault installs f, called for every bulk item before it is applied: a non-zero
// status fails the item with that status (429, 400, 503, ...) and leaves it unapplied.
// nil removes the fault.
func (s *Server) SetItemFault(f func(Item) int) {
	s.mu.Lock()
	s.itemFault = f
	s.mu.Unlock()
}

// ReplyFault is how a lying server answers for one item it did not store.
type ReplyFault uint8

const (
	// ReplyTruthfully stores the item and answers for it.
	ReplyTruthfully ReplyFault = iota
	// ReplyOmit stores nothing and leaves the item out of the reply, which still says
	// 200 with "errors": false: a short item list.
	ReplyOmit
	// ReplyOtherID stores nothing and answers 201 "created" for another _id.
	ReplyOtherID
	// ReplyNoStatus stores nothing and answers an item with no status at all.
	ReplyNoStatus
	// ReplyTwice stores the item and answers for it twice: a reply with more items
	// than the request.
	ReplyTwice
)

// SetReplyFault installs f, called for every bulk item before it is applied, to make
// the server lie about it (see ReplyFault). nil removes the fault.
func (s *Server) SetReplyFault(f func(Item) ReplyFault) {
	s.mu.Lock()
	s.replyFault = f
	s.mu.Unlock()
}

// Count is the number of stored documents.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, byIndex := range s.docs {
		n += len(byIndex)
	}
	return n
}

// IDs returns the distinct stored _ids, sorted.
func (s *Server) IDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.docs))
	for id := range s.docs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Docs returns copies of every stored document.
func (s *Server) Docs() []Doc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Doc
	for _, byIndex := range s.docs {
		for _, d := range byIndex {
			out = append(out, *d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// Duplicates returns the _ids stored in more than one index: what a search over the
// index pattern would show twice.
func (s *Server) Duplicates() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, byIndex := range s.docs {
		if len(byIndex) > 1 {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Seq is the Seq of the latest first-indexed document (0 when empty).
func (s *Server) Seq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// DocSeq returns the Seq with which the document with this _id was first stored.
func (s *Server) DocSeq(id string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best := int64(0)
	for _, d := range s.docs[id] {
		if best == 0 || d.Seq < best {
			best = d.Seq
		}
	}
	return best, best != 0
}

// Template returns an installed index template body.
func (s *Server) Template(name string) (json.RawMessage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.templates[name]
	return b, ok
}

// Policy returns an installed ILM policy body.
func (s *Server) Policy(name string) (json.RawMessage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.policies[name]
	return b, ok
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	s.mu.Lock()
	noProduct := s.noProduct
	s.mu.Unlock()
	if !noProduct {
		w.Header().Set("X-Elastic-Product", "Elasticsearch")
	}
	w.Header().Set("Content-Type", "application/json")

	path := strings.Trim(r.URL.Path, "/")
	parts := strings.Split(path, "/")
	switch {
	case path == "" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		writeJSON(w, http.StatusOK, map[string]any{
			"name": "esfake", "cluster_name": "esfake", "cluster_uuid": "esfake-cluster",
			"version": map[string]any{"number": "8.19.0", "build_flavor": "default",
				"lucene_version": "9.12.0", "minimum_wire_compatibility_version": "7.17.0"},
			"tagline": "You Know, for Search",
		})
	case len(parts) == 2 && parts[0] == "_index_template":
		s.serveSetup(w, r, s.templates, parts[1], "index_templates")
	case parts[0] == "_ilm":
		s.serveSetup(w, r, s.policies, parts[len(parts)-1], "policies")
	case parts[len(parts)-1] == "_bulk" && len(parts) <= 2 &&
		(r.Method == http.MethodPost || r.Method == http.MethodPut):
		defaultIndex := ""
		if len(parts) == 2 {
			defaultIndex = parts[0]
		}
		s.serveBulk(w, r, defaultIndex)
	case len(parts) == 1 && r.Method == http.MethodDelete && !strings.HasPrefix(path, "_"):
		s.deleteIndex(w, path)
	default:
		writeError(w, http.StatusNotFound, "resource_not_found_exception",
			fmt.Sprintf("esfake does not implement %s /%s", r.Method, path))
	}
}

// serveSetup answers a template or policy call, with the setup faults.
func (s *Server) serveSetup(w http.ResponseWriter, r *http.Request, store map[string]json.RawMessage, name, listKey string) {
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		s.mu.Lock()
		s.setupCalls = append(s.setupCalls, r.Method+" "+r.URL.Path+" "+fmt.Sprint(rec.status))
		s.mu.Unlock()
	}()
	s.mu.Lock()
	missing, refused := s.missing[strings.SplitN(strings.Trim(r.URL.Path, "/"), "/", 2)[0]], s.refusedKeys
	fail := s.failSetup > 0
	if fail {
		s.failSetup--
	}
	status := s.setupStatus
	s.mu.Unlock()
	isPolicy := listKey == "policies"
	switch {
	case missing == http.StatusBadRequest:
		// Elasticsearch's own words for a path it has no handler for.
		writeJSON(rec, missing, map[string]any{"error": fmt.Sprintf("no handler found for uri [%s] and method [%s]", r.URL.Path, r.Method)})
		return
	case missing != 0:
		writeError(rec, missing, "resource_not_found_exception", "no such endpoint: "+r.URL.Path)
		return
	case fail:
		writeError(rec, status, errorType(status), "injected setup failure")
		return
	}
	if !isPolicy && len(refused) > 0 && (r.Method == http.MethodPut || r.Method == http.MethodPost) {
		body, err := readBody(r)
		if err != nil {
			writeError(rec, http.StatusBadRequest, "parse_exception", err.Error())
			return
		}
		if key := refusedKey(body, refused); key != "" {
			if strings.HasPrefix(key, "index.") {
				writeError(rec, http.StatusBadRequest, "illegal_argument_exception",
					fmt.Sprintf("unknown setting [%s] please check that any required plugins are installed, or check the breaking changes documentation for removed settings", key))
			} else {
				writeError(rec, http.StatusBadRequest, "x_content_parse_exception",
					fmt.Sprintf("[1:2] [index_template] unknown field [%s]", key))
			}
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.Header.Del("Content-Encoding")
	}
	s.serveObject(rec, r, store, name, listKey)
}

// refusedKey returns the first of keys the template body holds.
func refusedKey(body []byte, keys []string) string {
	var tpl struct {
		Template struct {
			Settings map[string]any `json:"settings"`
		} `json:"template"`
	}
	var top map[string]json.RawMessage
	json.Unmarshal(body, &tpl)
	json.Unmarshal(body, &top)
	for _, k := range keys {
		if _, ok := top[k]; ok {
			return k
		}
		if _, ok := tpl.Template.Settings[k]; ok {
			return k
		}
	}
	return ""
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// serveObject stores (PUT) or returns (GET) a named JSON object: templates and policies.
func (s *Server) serveObject(w http.ResponseWriter, r *http.Request, store map[string]json.RawMessage, name, listKey string) {
	switch r.Method {
	case http.MethodPut, http.MethodPost:
		body, err := readBody(r)
		if err != nil || !json.Valid(body) {
			writeError(w, http.StatusBadRequest, "parse_exception", "request body is not valid JSON")
			return
		}
		s.mu.Lock()
		store[name] = json.RawMessage(body)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"acknowledged": true})
	case http.MethodGet:
		s.mu.Lock()
		b, ok := store[name]
		s.mu.Unlock()
		if !ok {
			writeError(w, http.StatusNotFound, "resource_not_found_exception", name+" missing")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{listKey: []any{map[string]any{"name": name, "body": b}}})
	default:
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method)
	}
}

type bulkResult struct {
	Index   string         `json:"_index"`
	ID      string         `json:"_id"`
	Version int64          `json:"_version,omitempty"`
	Result  string         `json:"result,omitempty"`
	Status  int            `json:"status"`
	Error   map[string]any `json:"error,omitempty"`
}

// bulkOp is one operation of a bulk request.
type bulkOp struct {
	action, index, id string
	source            []byte
}

func (s *Server) serveBulk(w http.ResponseWriter, r *http.Request, defaultIndex string) {
	body, err := readBody(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "parse_exception", err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failRequests > 0 {
		s.failRequests--
		f := s.requestFault
		w.Header().Set("Content-Type", f.ContentType)
		w.WriteHeader(f.Status)
		io.WriteString(w, f.Body)
		return
	}

	// Like Elasticsearch, parse the whole request before applying any of it.
	var ops []bulkOp
	lines := bufio.NewReader(bytes.NewReader(body))
	for {
		line, err := readLine(lines)
		if err == io.EOF {
			break
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "illegal_argument_exception",
				"the bulk request must be terminated by a newline [\\n]")
			return
		}
		if len(line) == 0 {
			continue
		}
		var action map[string]struct {
			Index string `json:"_index"`
			ID    string `json:"_id"`
		}
		if err := json.Unmarshal(line, &action); err != nil || len(action) != 1 {
			writeError(w, http.StatusBadRequest, "illegal_argument_exception", "malformed action/metadata line")
			return
		}
		var op bulkOp
		for k, v := range action {
			op = bulkOp{action: k, index: v.Index, id: v.ID}
		}
		if op.action != "delete" {
			op.source, err = readLine(lines)
			if err != nil {
				writeError(w, http.StatusBadRequest, "illegal_argument_exception",
					"the bulk request must be terminated by a newline [\\n]")
				return
			}
		}
		if op.index == "" {
			op.index = defaultIndex
		}
		ops = append(ops, op)
	}
	if s.wholeRequests {
		mappings := map[string]map[string]field{}
		for _, op := range ops {
			if op.action != "index" && op.action != "create" {
				continue
			}
			fields, ok := mappings[op.index]
			if !ok {
				fields = s.fieldsFor(op.index)
				mappings[op.index] = fields
			}
			if _, reason := s.checkDoc(fields, op.id, op.source); reason != "" {
				writeJSON(w, http.StatusBadRequest, map[string]any{"error": reason, "status": http.StatusBadRequest})
				return
			}
		}
	}

	var items []map[string]bulkResult
	anyErr := false
	for _, op := range ops {
		if s.replyFault != nil {
			fault := s.replyFault(Item{Action: op.action, Index: op.index, ID: op.id, Source: op.source, Attempt: s.attempts[op.id] + 1})
			switch fault {
			case ReplyOmit:
				s.attempts[op.id]++
				continue
			case ReplyOtherID:
				s.attempts[op.id]++
				items = append(items, map[string]bulkResult{op.action: {Index: op.index, ID: "other-" + op.id,
					Version: 1, Result: "created", Status: http.StatusCreated}})
				continue
			case ReplyNoStatus:
				s.attempts[op.id]++
				items = append(items, map[string]bulkResult{op.action: {Index: op.index, ID: op.id}})
				continue
			case ReplyTwice:
				res := s.applyItem(op.action, op.index, op.id, op.source)
				items = append(items, map[string]bulkResult{op.action: res}, map[string]bulkResult{op.action: res})
				continue
			}
		}
		res := s.applyItem(op.action, op.index, op.id, op.source)
		if res.Status >= 300 {
			anyErr = true
		}
		items = append(items, map[string]bulkResult{op.action: res})
	}
	writeJSON(w, http.StatusOK, map[string]any{"took": 1, "errors": anyErr, "items": items})
}

// fieldsFor returns the field mappings of an index: its own if it exists, else those
// of the template it would be created from. s.mu is held.
func (s *Server) fieldsFor(index string) map[string]field {
	if fields, ok := s.indices[index]; ok {
		return fields
	}
	return s.templateFields(index)
}

// createIndex creates an index from its template unless it exists. s.mu is held.
func (s *Server) createIndex(index string) {
	if _, ok := s.indices[index]; !ok {
		s.indices[index] = s.templateFields(index)
	}
}

// templateFields returns the field mappings of the highest-priority template whose
// pattern matches index (nil for none). s.mu is held.
func (s *Server) templateFields(index string) map[string]field {
	var best map[string]field
	bestPriority := -1
	for _, body := range s.templates {
		var tpl struct {
			IndexPatterns json.RawMessage `json:"index_patterns"`
			Priority      int             `json:"priority"`
			Template      struct {
				Mappings struct {
					Properties map[string]field `json:"properties"`
				} `json:"mappings"`
			} `json:"template"`
		}
		if json.Unmarshal(body, &tpl) != nil {
			continue
		}
		var patterns []string
		if json.Unmarshal(tpl.IndexPatterns, &patterns) != nil {
			var one string
			json.Unmarshal(tpl.IndexPatterns, &one)
			patterns = []string{one}
		}
		for _, p := range patterns {
			if ok, _ := path.Match(p, index); ok && tpl.Priority > bestPriority {
				best, bestPriority = tpl.Template.Mappings.Properties, tpl.Priority
				if best == nil {
					best = map[string]field{}
				}
			}
		}
	}
	return best
}

// maxKeywordBytes is the longest term Lucene indexes: a longer keyword value refuses
// the document.
const maxKeywordBytes = 32766

// checkDoc returns why the server cannot take a document under fields, as the error
// type and reason of its item; "" when it can. Only top-level mapped fields are
// checked; unmapped ones are kept in _source (the templates say dynamic: false).
// s.mu is held.
func (s *Server) checkDoc(fields map[string]field, id string, source []byte) (typ, reason string) {
	if len(fields) == 0 {
		return "", ""
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(source, &doc) != nil {
		return "", ""
	}
	names := make([]string, 0, len(doc))
	for name := range doc {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f, ok := fields[name]
		raw := doc[name]
		if !ok || string(raw) == "null" {
			continue
		}
		var str string
		isString := json.Unmarshal(raw, &str) == nil
		switch f.Type {
		case "keyword":
			if isString && len(str) > maxKeywordBytes {
				return "document_parsing_exception", fmt.Sprintf("failed to parse: Document contains at least one immense term in field=%q "+
					"(whose UTF8 encoding is longer than the max length %d), all of which were skipped. "+
					"Please correct the analyzer to not produce such terms.", name, maxKeywordBytes)
			}
		case "date":
			if why := s.parseDate(f.Format, raw, str, isString); why != "" {
				value := str
				if !isString {
					value = string(raw)
				}
				if s.dates == ElasticsearchDates {
					return "document_parsing_exception", fmt.Sprintf("failed to parse field [%s] of type [date] in document with id '%s'. "+
						"Preview of field's value: '%s'", name, id, preview(value))
				}
				return "mapper_parsing_exception", fmt.Sprintf("field [%s] value [%s] parse err: time format is [%s]", name, value, why)
			}
		}
	}
	return "", ""
}

// parseDate returns "" when the server's date grammar parses a value under format, else
// the name of the format it tried. s.mu is held.
func (s *Server) parseDate(format string, raw json.RawMessage, str string, isString bool) string {
	_, numErr := strconv.ParseInt(string(raw), 10, 64)
	switch s.dates {
	case RFC3339Dates:
		if format != "" {
			return format
		}
		if _, err := time.Parse(time.RFC3339Nano, str); !isString || err != nil {
			return "rfc3339"
		}
	case EpochMillisDates:
		if numErr != nil {
			return "epoch_millis"
		}
	default:
		if numErr == nil {
			return ""
		}
		if _, err := time.Parse(time.RFC3339Nano, str); !isString || err != nil {
			if _, err := time.Parse("2006-01-02", str); err != nil {
				return "strict_date_optional_time||epoch_millis"
			}
		}
	}
	return ""
}

// preview shortens a value as Elasticsearch's error messages do.
func preview(v string) string {
	if len(v) <= 40 {
		return v
	}
	cut := 40
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut] + "..."
}

// deleteIndex deletes an index and its documents.
func (s *Server) deleteIndex(w http.ResponseWriter, index string) {
	s.mu.Lock()
	_, ok := s.indices[index]
	if ok {
		delete(s.indices, index)
		for id, byIndex := range s.docs {
			delete(byIndex, index)
			if len(byIndex) == 0 {
				delete(s.docs, id)
			}
		}
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "index_not_found_exception", "no such index ["+index+"]")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"acknowledged": true})
}

// applyItem applies one operation; s.mu is held.
func (s *Server) applyItem(op, index, id string, source []byte) bulkResult {
	res := bulkResult{Index: index, ID: id}
	fail := func(status int, typ, reason string) bulkResult {
		res.Status = status
		res.Error = map[string]any{"type": typ, "reason": reason, "index": index}
		return res
	}
	if index == "" {
		return fail(http.StatusBadRequest, "action_request_validation_exception", "Validation Failed: 1: index is missing;")
	}
	if id == "" {
		s.seq++
		id = fmt.Sprintf("auto-%d", s.seq)
		res.ID = id
	}
	s.attempts[id]++
	if s.itemFault != nil {
		if st := s.itemFault(Item{Action: op, Index: index, ID: id, Source: source, Attempt: s.attempts[id]}); st != 0 {
			return fail(st, errorType(st), "injected item failure")
		}
	}
	existing := s.docs[id][index]
	switch op {
	case "index", "create":
		if !json.Valid(source) {
			return fail(http.StatusBadRequest, "document_parsing_exception", "failed to parse: source is not JSON")
		}
		if op == "create" && existing != nil {
			return fail(http.StatusConflict, "version_conflict_engine_exception",
				fmt.Sprintf("[%s]: version conflict, document already exists", id))
		}
		// Like Elasticsearch, the first write creates the index, even when its
		// document is then refused.
		s.createIndex(index)
		if typ, reason := s.checkDoc(s.indices[index], id, source); reason != "" {
			return fail(http.StatusBadRequest, typ, reason)
		}
		if existing != nil {
			existing.Version++
			existing.Source = append(json.RawMessage(nil), source...)
			res.Version, res.Result, res.Status = existing.Version, "updated", http.StatusOK
			return res
		}
		s.seq++
		if s.docs[id] == nil {
			s.docs[id] = map[string]*Doc{}
		}
		s.docs[id][index] = &Doc{Index: index, ID: id, Source: append(json.RawMessage(nil), source...), Version: 1, Seq: s.seq}
		res.Version, res.Result, res.Status = 1, "created", http.StatusCreated
		return res
	case "delete":
		if existing == nil {
			res.Result, res.Status = "not_found", http.StatusNotFound
			return res
		}
		delete(s.docs[id], index)
		if len(s.docs[id]) == 0 {
			delete(s.docs, id)
		}
		res.Result, res.Status = "deleted", http.StatusOK
		return res
	default:
		return fail(http.StatusBadRequest, "illegal_argument_exception", "esfake does not implement bulk action "+op)
	}
}

func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "es_rejected_execution_exception"
	case status == http.StatusBadRequest:
		return "document_parsing_exception"
	case status >= 500:
		return "unavailable_shards_exception"
	default:
		return "exception"
	}
}

func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err == io.EOF && len(line) > 0 {
		return nil, io.ErrUnexpectedEOF // the last line must end with a newline
	}
	if err != nil {
		return nil, err
	}
	return bytes.TrimRight(line, "\r\n"), nil
}

func readBody(r *http.Request) ([]byte, error) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		body = zr
	}
	return io.ReadAll(body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, typ, reason string) {
	w.WriteHeader(status)
	io.WriteString(w, errorBody(status, typ, reason))
}

// errorBody is Elasticsearch's error document.
func errorBody(status int, typ, reason string) string {
	e := map[string]any{"type": typ, "reason": reason}
	b, _ := json.Marshal(map[string]any{
		"error":  map[string]any{"root_cause": []any{e}, "type": typ, "reason": reason},
		"status": status,
	})
	return string(b) + "\n"
}
