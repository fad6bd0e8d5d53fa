package dispatch

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/web"
)

// RecordStore is what an agent's list of its dispatches needs from the database of
// record (MySQL, internal/store).
type RecordStore interface {
	// ListDispatches returns up to limit records matching f, newest first, after the
	// cursor after (nil: from the newest).
	ListDispatches(ctx context.Context, f taskd.DispatchFilter, after *taskd.DispatchCursor, limit int) ([]taskd.DispatchRecord, error)
}

// KeyVerifier checks a client key (Redis, package queue, which asks MySQL when it does
// not know).
type KeyVerifier interface {
	// VerifyKey reports whether keyHash is one of uid's valid client keys.
	VerifyKey(ctx context.Context, uid, keyHash string) error
}

// Records serves an agent's own dispatch records, newest first (GET /v1/dispatches):
// what it was handed, and what became of each.
type Records struct {
	store RecordStore
	keys  KeyVerifier
	log   *slog.Logger
	// isAdminToken: as Handlers'.
	isAdminToken func(token string) bool
}

// RecognizeAdminTokens: as Handlers'.
func (rs *Records) RecognizeAdminTokens(isAdminToken func(token string) bool) *Records {
	rs.isAdminToken = isAdminToken
	return rs
}

// NewRecords returns the list over st, checking client keys with keys.
func NewRecords(st RecordStore, keys KeyVerifier, log *slog.Logger) *Records {
	return &Records{store: st, keys: keys, log: log}
}

// Default and most records of one page.
const (
	defaultPage = 100
	maxPage     = 1000
)

// List is GET /v1/dispatches?state=&limit=&cursor=: the caller's records (the user
// comes from the key), in the admin list's shape and order, paged by the same cursor.
func (rs *Records) List() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uid, hash, ok := clientKey(w, r, rs.log, rs.isAdminToken)
		if !ok {
			return
		}
		// Authentication first: a request with bad parameters and a bad key is a 401.
		if err := rs.keys.VerifyKey(r.Context(), uid, hash); err != nil {
			web.Error(w, r, rs.log, err)
			return
		}
		f, after, limit, err := listQuery(r.URL.Query())
		if err != nil {
			web.Error(w, r, rs.log, err)
			return
		}
		f.UID = uid
		records, err := rs.store.ListDispatches(r.Context(), f, after, limit+1)
		if err != nil {
			web.Error(w, r, rs.log, err)
			return
		}
		next := ""
		if len(records) > limit {
			records = records[:limit]
			last := records[limit-1]
			next = taskd.DispatchCursor{DispatchedAt: last.DispatchedAt, LogID: last.LogID}.Encode()
		}
		web.Encode(w, http.StatusOK, map[string]any{"dispatches": records, "next_cursor": next})
	})
}

// listQuery reads an agent list's query parameters: state, limit (1..1000, default
// 100) and cursor; any other is refused, so that a typo does not silently widen the
// list.
func listQuery(q url.Values) (f taskd.DispatchFilter, after *taskd.DispatchCursor, limit int, err error) {
	for k := range q {
		if k != "state" && k != "limit" && k != "cursor" {
			return f, nil, 0, taskd.Errorf(taskd.CodeInvalid, "unknown query parameter %q", k)
		}
	}
	if v := q.Get("state"); v != "" {
		if f.State, err = taskd.ParseDispatchState(v); err != nil {
			return f, nil, 0, err
		}
	}
	limit = defaultPage
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > maxPage {
			return f, nil, 0, taskd.Errorf(taskd.CodeInvalid, "limit: must be 1..%d, got %q", maxPage, v)
		}
	}
	after, err = taskd.ParseDispatchCursor(q.Get("cursor"))
	return f, after, limit, err
}
