package admin

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/config"
	"github.com/taskpull/taskd/internal/web"
)

// Campaigns (seed 000), for admins: create one, upload its uids, start, pause, resume
// and stop it (each audited), and read its progress.

// CampaignStore is what the campaign endpoints need from MySQL (internal/store).
type CampaignStore interface {
	CreateCampaign(ctx context.Context, actor string, c taskd.Campaign, uids []string, now time.Time) (taskd.Campaign, error)
	AddCampaignUIDs(ctx context.Context, actor string, id int64, next func() (string, bool, error), now time.Time) (taskd.Campaign, error)
	GetCampaign(ctx context.Context, id int64) (taskd.Campaign, error)
	ListCampaigns(ctx context.Context, states []taskd.CampaignState, before int64, limit int) ([]taskd.Campaign, error)
}

// CampaignEngine moves campaigns and reads their live windows (package campaign).
type CampaignEngine interface {
	Move(ctx context.Context, actor string, id int64, move taskd.CampaignMove, ifMatch taskd.IfMatch) (taskd.Campaign, error)
	Live(ctx context.Context, c taskd.Campaign) (taskd.Campaign, error)
	// Failures are c's latest failures, newest first, and how many its error budget
	// counts now.
	Failures(ctx context.Context, c taskd.Campaign) ([]taskd.CampaignFailure, int64, error)
}

// Campaigns serves the campaign endpoints.
type Campaigns struct {
	store  CampaignStore
	engine CampaignEngine
	svc    *Service
	h      *Handlers
	// uploads holds a token per upload being read (its capacity is the node's limit);
	// uploadTotal bounds one upload's reading in all.
	uploads     chan struct{}
	uploadTotal time.Duration
}

// The upload limits when WithUploadLimits is not called: DISPATCH_UPLOADS' and
// DISPATCH_UPLOAD_TIMEOUT's defaults.
const (
	DefaultUploads       = 4
	DefaultUploadTimeout = 10 * time.Minute
)

// NewCampaigns returns the campaign endpoints; svc checks templates and params.
func NewCampaigns(st CampaignStore, engine CampaignEngine, h *Handlers) *Campaigns {
	return &Campaigns{store: st, engine: engine, svc: h.svc, h: h,
		uploads: make(chan struct{}, DefaultUploads), uploadTotal: DefaultUploadTimeout}
}

// WithUploadLimits bounds the uploads of items: at most concurrent read at once on
// this node (each may spool maxUpload bytes to disk), each read within total.
// Zero or less keeps the default.
func (cs *Campaigns) WithUploadLimits(concurrent int, total time.Duration) *Campaigns {
	if concurrent > 0 {
		cs.uploads = make(chan struct{}, concurrent)
	}
	if total > 0 {
		cs.uploadTotal = total
	}
	return cs
}

// Campaign defaults.
const (
	defaultCampaignRate    = 10
	defaultCampaignLease   = 60
	defaultCampaignBackoff = 10
	// windowPerRate is the default window in seconds of the rate (seed 000: ten times
	// the rate).
	windowPerRate = 10
)

type campaignRequest struct {
	Name       reqName         `json:"name"`
	TemplateID *reqInt         `json:"template_id"`
	Params     json.RawMessage `json:"params"`
	Executor   *string         `json:"executor"`
	Items      *struct {
		Count *reqInt  `json:"count"`
		UIDs  []string `json:"uids"`
	} `json:"items"`
	RatePerSecond *reqFloat `json:"rate_per_second"`
	Window        *reqInt   `json:"window"`
	ErrorBudget   *struct {
		MaxFailures *reqInt `json:"max_failures"`
		PerSeconds  *reqInt `json:"per_seconds"`
	} `json:"error_budget"`
	LeaseSeconds        *reqInt `json:"lease_seconds"`
	MaxAttempts         *reqInt `json:"max_attempts"`
	RetryBackoffSeconds *reqInt `json:"retry_backoff_seconds"`
	// Windows: the items are handed out only while one is open (absent: any time).
	Windows taskd.Windows `json:"windows"`
}

// campaign checks the request and returns the campaign it describes, and its uids.
func (req campaignRequest) campaign() (taskd.Campaign, []string, error) {
	c := taskd.Campaign{Name: strings.TrimSpace(req.Name.s), Params: req.Params, RatePerSecond: defaultCampaignRate,
		LeaseSeconds: defaultCampaignLease, MaxAttempts: 3, RetryBackoffSeconds: defaultCampaignBackoff}
	if err := checkName(c.Name); err != nil {
		return c, nil, err
	}
	if req.TemplateID == nil {
		return c, nil, taskd.Errorf(taskd.CodeInvalid, "template_id: required")
	}
	id, err := req.TemplateID.in("template_id", 1, math.MaxInt64, "a template id (>= 1)")
	if err != nil {
		return c, nil, err
	}
	c.TemplateID = id
	if len(c.Params) == 0 || string(c.Params) == "null" {
		c.Params = json.RawMessage("{}")
	} else if !isObject(c.Params) {
		return c, nil, taskd.Errorf(taskd.CodeInvalid, "params: must be an object")
	}
	if req.Executor == nil {
		return c, nil, taskd.Errorf(taskd.CodeInvalid, "executor: required, uid_<id> or gid_<id>")
	}
	ex, err := taskd.ParseExecutor(*req.Executor)
	if err != nil {
		return c, nil, err
	}
	c.Executor = ex.String()
	var uids []string
	switch it := req.Items; {
	case it == nil || it.Count == nil && it.UIDs == nil:
		return c, nil, taskd.Errorf(taskd.CodeInvalid, `items: required, {"count": n} or {"uids": [...]} (an empty list, then upload)`)
	case it.Count != nil && it.UIDs != nil:
		return c, nil, taskd.Errorf(taskd.CodeInvalid, "items: give count or uids, not both")
	case it.Count != nil:
		n, err := it.Count.in("items.count", 1, taskd.MaxCampaignItems, "1..1000000000")
		if err != nil {
			return c, nil, err
		}
		c.Items, c.Total = taskd.ItemsCount, n
	default:
		if len(it.UIDs) > taskd.MaxInlineUIDs {
			return c, nil, taskd.Errorf(taskd.CodeInvalid, "items.uids: at most %d here; upload more (POST /v1/admin/campaigns/{id}/items)", taskd.MaxInlineUIDs)
		}
		for i, u := range it.UIDs {
			if err := bareID("items.uids["+strconv.Itoa(i)+"]", u); err != nil {
				return c, nil, err
			}
		}
		c.Items, c.Total, uids = taskd.ItemsUIDs, int64(len(it.UIDs)), it.UIDs
	}
	if req.RatePerSecond != nil {
		v, err := strconv.ParseFloat(req.RatePerSecond.lit, 64)
		if err != nil || !(v >= 0.001 && v <= taskd.MaxCampaignRate) {
			return c, nil, taskd.Errorf(taskd.CodeInvalid, "rate_per_second: must be a number 0.001..%d, got %s",
				taskd.MaxCampaignRate, web.Describe([]byte(req.RatePerSecond.lit)))
		}
		c.RatePerSecond = v
	}
	c.Window = int(min(max(math.Ceil(windowPerRate*c.RatePerSecond), 1), taskd.MaxCampaignWindow))
	for _, f := range []struct {
		dst     *int
		n       *reqInt
		field   string
		lo, hi  int64
		allowed string
	}{
		{&c.Window, req.Window, "window", 1, taskd.MaxCampaignWindow, "1..100000"},
		{&c.LeaseSeconds, req.LeaseSeconds, "lease_seconds", 1, 86400, "1..86400 (a campaign item's lease always ends)"},
		{&c.MaxAttempts, req.MaxAttempts, "max_attempts", 1, maxAttemptsLimit, "1..100"},
		{&c.RetryBackoffSeconds, req.RetryBackoffSeconds, "retry_backoff_seconds", 0, maxBackoffSeconds, "0..86400 (at most a day)"},
	} {
		if f.n == nil {
			continue
		}
		v, err := f.n.in(f.field, f.lo, f.hi, f.allowed)
		if err != nil {
			return c, nil, err
		}
		*f.dst = int(v)
	}
	if err := req.Windows.Validate(); err != nil {
		return c, nil, err
	}
	if len(req.Windows) > 0 {
		c.Windows = req.Windows.Normalized()
	}
	if b := req.ErrorBudget; b != nil {
		if b.MaxFailures == nil || b.PerSeconds == nil {
			return c, nil, taskd.Errorf(taskd.CodeInvalid, "error_budget: give max_failures and per_seconds")
		}
		mf, err := b.MaxFailures.in("error_budget.max_failures", 0, 1_000_000, "0..1000000")
		if err != nil {
			return c, nil, err
		}
		ps, err := b.PerSeconds.in("error_budget.per_seconds", 1, 86400, "1..86400")
		if err != nil {
			return c, nil, err
		}
		c.ErrorBudget = &taskd.ErrorBudget{MaxFailures: int(mf), PerSeconds: int(ps)}
	}
	return c, uids, nil
}

// CreateCampaign is POST /v1/admin/campaigns.
func (cs *Campaigns) CreateCampaign() http.Handler {
	return cs.h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		var req campaignRequest
		if err := web.Decode(w, r, bodyLimit, false, &req); err != nil {
			return 0, nil, err
		}
		c, uids, err := req.campaign()
		if err != nil {
			return 0, nil, err
		}
		if err := cs.svc.validateParams(r.Context(), c.TemplateID, c.Params); err != nil {
			return 0, nil, err
		}
		if tpl, err := cs.svc.GetTemplate(r.Context(), c.TemplateID); err != nil {
			return 0, nil, err
		} else if tpl.DDI {
			return 0, nil, taskd.Errorf(taskd.CodeInvalid, "template_id: template %d is a DDI template: campaign items go to fetch agents, deployments to DDI controllers through tasks", c.TemplateID)
		}
		salt := make([]byte, 16)
		rand.Read(salt)
		c.Salt = hex.EncodeToString(salt)
		c, err = cs.store.CreateCampaign(r.Context(), ActorFrom(r.Context()), c, uids, cs.svc.now())
		return http.StatusCreated, c, tagged(w, c.Version(), err)
	})
}

// maxUpload bounds an upload of uids (about eight million of them).
const maxUpload = 512 << 20

// uploadIdle is how long an upload may send nothing before it is given up, and
// uploadCommit how long its uids, once received, may take to be added and answered.
const (
	uploadIdle   = 30 * time.Second
	uploadCommit = 2 * time.Minute
	// uploadRetry is the Retry-After of an upload refused for want of a slot.
	uploadRetry = 10 * time.Second
)

// UploadItems is POST /v1/admin/campaigns/{id}/items: uids appended to a uid-list
// campaign before its start, as NDJSON (one JSON string, or {"uid": ...}, a line) or
// CSV (one column, the uid; a first row "uid" is a header). The upload is read and
// checked first, as it arrives, into a temporary file, holding no lock and no database
// connection however slowly it comes (and given up after uploadIdle without data);
// then its uids are added in one transaction: a bad line adds nothing, and the error
// names it.
func (cs *Campaigns) UploadItems() http.Handler {
	return cs.h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		id, err := pathID(r, "id")
		if err != nil {
			return 0, nil, err
		}
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		body := &idleReader{r: http.MaxBytesReader(w, r.Body, maxUpload), rc: http.NewResponseController(w),
			end: time.Now().Add(cs.uploadTotal)}
		var next func() (string, bool, error)
		switch mt {
		case "application/x-ndjson", "application/jsonl":
			next = ndjsonUIDs(body)
		case "text/csv":
			next = csvUIDs(body)
		default:
			return 0, nil, taskd.Errorf(taskd.CodeInvalid, "Content-Type: application/x-ndjson or text/csv, got %q", r.Header.Get("Content-Type"))
		}
		// Refused before the upload is read when the campaign cannot take it (the
		// transaction checks again).
		c, err := cs.store.GetCampaign(r.Context(), id)
		if err != nil {
			return 0, nil, err
		}
		if err := uploadable(c); err != nil {
			return 0, nil, err
		}
		// A slot of this node's uploads, held until the reply (the spooled file
		// lives until then); none free: refused at once, before any byte is read, and
		// the connection closed after the reply (net/http would otherwise read up to
		// 256 KiB of the unread upload first, and hold the reply for as long as a slow
		// uploader takes to send them).
		select {
		case cs.uploads <- struct{}{}:
			defer func() { <-cs.uploads }()
		default:
			w.Header().Set("Connection", "close")
			return 0, nil, &taskd.Error{Code: taskd.CodeRateLimited, RetryAfter: uploadRetry,
				Message: fmt.Sprintf("upload: this node is reading %d uploads already (DISPATCH_UPLOADS); retry after Retry-After seconds", cap(cs.uploads))}
		}
		spooled, err := spool(next)
		if spooled != nil {
			defer spooled.close()
		}
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return 0, nil, taskd.Errorf(taskd.CodeTooLarge, "upload: over %d bytes; split it into several uploads", maxUpload)
		case errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(body.end):
			return 0, nil, taskd.Errorf(taskd.CodeInvalid, "upload: not received within %s (DISPATCH_UPLOAD_TIMEOUT); nothing was added; split it into smaller uploads",
				config.FormatDuration(cs.uploadTotal))
		case errors.Is(err, os.ErrDeadlineExceeded):
			return 0, nil, taskd.Errorf(taskd.CodeInvalid, "upload: nothing came for %s; nothing was added", uploadIdle)
		case err != nil:
			return 0, nil, err
		}
		// The server's write deadline was set when the request came; a long upload may
		// have used it up, and a reply cut off after the commit would have the client
		// send the uids again (and an upload appends). The transaction and the reply
		// get a bound of their own.
		body.rc.SetWriteDeadline(time.Now().Add(uploadCommit))
		ctx, cancel := context.WithTimeout(r.Context(), uploadCommit)
		defer cancel()
		c, err = cs.store.AddCampaignUIDs(ctx, ActorFrom(ctx), id, spooled.next, cs.svc.now())
		return http.StatusOK, c, tagged(w, c.Version(), err)
	})
}

// uploadable refuses an upload to a campaign that does not take one.
func uploadable(c taskd.Campaign) error {
	switch {
	case c.Items != taskd.ItemsUIDs:
		return taskd.Errorf(taskd.CodeConflict, "campaign %d has numbered items (count); only a uid-list campaign takes uploads", c.ID)
	case c.State != taskd.CampaignCreated:
		return taskd.Errorf(taskd.CodeConflict, "campaign %d is %s; items are uploaded before the start", c.ID, c.State)
	}
	return nil
}

// idleReader reads a request body, giving up when nothing came for uploadIdle, and at
// end whatever comes (a steady trickle would otherwise push the deadline on for ever).
type idleReader struct {
	r   io.Reader
	rc  *http.ResponseController
	end time.Time
}

func (b *idleReader) Read(p []byte) (int, error) {
	deadline := time.Now().Add(uploadIdle)
	if b.end.Before(deadline) {
		deadline = b.end
	}
	b.rc.SetReadDeadline(deadline) // not every server supports it (tests' recorders); then none
	return b.r.Read(p)
}

// spooled is an upload's uids, checked, in a temporary file: one a line.
type spooled struct {
	f  *os.File
	sc *bufio.Scanner
}

// spool reads every uid next yields into a temporary file (at most
// taskd.MaxCampaignItems of them), to be read back with next.
func spool(next func() (string, bool, error)) (*spooled, error) {
	f, err := os.CreateTemp("", "taskd-upload-*")
	if err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	s := &spooled{f: f}
	w := bufio.NewWriter(f)
	for n := 0; ; n++ {
		uid, ok, err := next()
		if err != nil {
			return s, err
		}
		if !ok {
			break
		}
		if n == taskd.MaxCampaignItems {
			return s, taskd.Errorf(taskd.CodeInvalid, "items: a campaign holds at most %d items", int64(taskd.MaxCampaignItems))
		}
		w.WriteString(uid)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		return s, fmt.Errorf("upload: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return s, fmt.Errorf("upload: %w", err)
	}
	s.sc = bufio.NewScanner(f)
	return s, nil
}

// next yields the spooled uids in order.
func (s *spooled) next() (string, bool, error) {
	if s.sc.Scan() {
		return s.sc.Text(), true, nil
	}
	return "", false, s.sc.Err()
}

func (s *spooled) close() {
	s.f.Close()
	os.Remove(s.f.Name())
}

// maxLine bounds a line of an upload, NDJSON's and CSV's alike.
const maxLine = 4096

// ndjsonUIDs reads uids, one a line: "u1" or {"uid": "u1"}; blank lines are skipped.
func ndjsonUIDs(r io.Reader) func() (string, bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, maxLine), maxLine)
	line := 0
	return func() (string, bool, error) {
		for sc.Scan() {
			line++
			b := strings.TrimSpace(sc.Text())
			if line == 1 {
				b = strings.TrimPrefix(b, "\ufeff")
			}
			if b == "" {
				continue
			}
			var uid string
			if strings.HasPrefix(b, "{") {
				var obj struct {
					UID string `json:"uid"`
				}
				if err := json.Unmarshal([]byte(b), &obj); err != nil {
					return "", false, taskd.Errorf(taskd.CodeInvalid, "line %d: %v", line, err)
				}
				uid = obj.UID
			} else if err := json.Unmarshal([]byte(b), &uid); err != nil {
				return "", false, taskd.Errorf(taskd.CodeInvalid, `line %d: want a JSON string or {"uid": ...}, got %s`, line, web.Describe([]byte(b)))
			}
			if err := bareID("line "+strconv.Itoa(line), uid); err != nil {
				return "", false, err
			}
			return uid, true, nil
		}
		if err := sc.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				return "", false, taskd.Errorf(taskd.CodeInvalid, "line %d: longer than %d bytes", line+1, maxLine)
			}
			return "", false, err
		}
		return "", false, nil
	}
}

// errLongLine is a CSV line over maxLine bytes.
var errLongLine = errors.New("line too long")

// lineLimit reads r, failing with errLongLine at a line longer than maxLine bytes: the
// CSV reader would hold a whole line (a record) in memory, however long.
type lineLimit struct {
	r    io.Reader
	run  int // bytes since the last newline
	line int // lines read, for the error
}

func (l *lineLimit) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for i, c := range p[:n] {
		if c == '\n' {
			l.run = 0
			l.line++
			continue
		}
		if l.run++; l.run > maxLine {
			return i, errLongLine
		}
	}
	return n, err
}

// csvUIDs reads uids from CSV records of one column; a first record "uid" is a header.
func csvUIDs(r io.Reader) func() (string, bool, error) {
	limited := &lineLimit{r: r}
	cr := csv.NewReader(limited)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	row := 0
	return func() (string, bool, error) {
		for {
			rec, err := cr.Read()
			if err == io.EOF {
				return "", false, nil
			}
			row++
			if errors.Is(err, errLongLine) {
				return "", false, taskd.Errorf(taskd.CodeInvalid, "line %d: longer than %d bytes", limited.line+1, maxLine)
			}
			if err != nil {
				var perr *csv.ParseError
				if errors.As(err, &perr) {
					return "", false, taskd.Errorf(taskd.CodeInvalid, "csv: %v", err)
				}
				return "", false, err
			}
			line, _ := cr.FieldPos(0)
			if len(rec) != 1 {
				return "", false, taskd.Errorf(taskd.CodeInvalid, "line %d: one column (the uid) a row, got %d", line, len(rec))
			}
			uid := strings.TrimSpace(rec[0])
			if row == 1 {
				uid = strings.TrimPrefix(uid, "\ufeff") // a spreadsheet's byte order mark
				if strings.EqualFold(uid, "uid") {
					continue
				}
			}
			if uid == "" {
				continue
			}
			if err := bareID("line "+strconv.Itoa(line), uid); err != nil {
				return "", false, err
			}
			return uid, true, nil
		}
	}
}

// GetCampaign is GET /v1/admin/campaigns/{id}.
func (cs *Campaigns) GetCampaign() http.Handler {
	return cs.h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		id, err := pathID(r, "id")
		if err != nil {
			return 0, nil, err
		}
		c, err := cs.store.GetCampaign(r.Context(), id)
		if err != nil {
			return 0, nil, err
		}
		c, err = cs.engine.Live(r.Context(), c)
		return http.StatusOK, c, tagged(w, c.Version(), err)
	})
}

// CampaignFailures is GET /v1/admin/campaigns/{id}/failures: the campaign's latest
// failures with their detail (kept in Redis by the windows, without Kafka), beside the
// two numbers they feed: failed (items failed for good, every attempt used) and
// budget_failures (failures of any attempt, lease expiries included, within the error
// budget's period: what pauses the campaign).
func (cs *Campaigns) CampaignFailures() http.Handler {
	return cs.h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		id, err := pathID(r, "id")
		if err != nil {
			return 0, nil, err
		}
		if err := known(r.URL.Query()); err != nil {
			return 0, nil, err
		}
		c, err := cs.store.GetCampaign(r.Context(), id)
		if err != nil {
			return 0, nil, err
		}
		if c, err = cs.engine.Live(r.Context(), c); err != nil {
			return 0, nil, err
		}
		list, recent, err := cs.engine.Failures(r.Context(), c)
		if err != nil {
			return 0, nil, err
		}
		var budget *int64
		if c.ErrorBudget != nil {
			budget = &recent
		}
		return http.StatusOK, map[string]any{"campaign_id": c.ID, "state": c.State, "reason": c.Reason,
			"failed": c.Failed, "error_budget": c.ErrorBudget, "budget_failures": budget, "failures": list}, nil
	})
}

// ListCampaigns is GET /v1/admin/campaigns?state=&limit=&cursor=, newest first.
func (cs *Campaigns) ListCampaigns() http.Handler {
	return cs.h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		q := r.URL.Query()
		if err := known(q, "state", "limit", "cursor"); err != nil {
			return 0, nil, err
		}
		var states []taskd.CampaignState
		if s := q.Get("state"); s != "" {
			switch st := taskd.CampaignState(s); st {
			case taskd.CampaignCreated, taskd.CampaignRunning, taskd.CampaignPaused, taskd.CampaignStopping,
				taskd.CampaignStopped, taskd.CampaignFinished:
				states = append(states, st)
			default:
				return 0, nil, taskd.Errorf(taskd.CodeInvalid, "state: must be created, running, paused, stopping, stopped or finished, got %q", s)
			}
		}
		limit, err := queryLimit(q)
		if err != nil {
			return 0, nil, err
		}
		before, err := idCursor(q)
		if err != nil {
			return 0, nil, err
		}
		list, err := cs.store.ListCampaigns(r.Context(), states, before, limit+1)
		if err != nil {
			return 0, nil, err
		}
		next := ""
		if len(list) > limit {
			list = list[:limit]
			next = encodeCursor(strconv.FormatInt(list[limit-1].ID, 10))
		}
		for i := range list {
			if list[i], err = cs.engine.Live(r.Context(), list[i]); err != nil {
				return 0, nil, err
			}
		}
		return http.StatusOK, map[string]any{"campaigns": list, "next_cursor": next}, nil
	})
}

// MoveCampaign is POST /v1/admin/campaigns/{id}/{move}: start, pause, resume or stop
// (409 conflict for a move the state does not allow).
func (cs *Campaigns) MoveCampaign() http.Handler {
	return cs.h.serve(func(w http.ResponseWriter, r *http.Request) (int, any, error) {
		id, err := pathID(r, "id")
		if err != nil {
			return 0, nil, err
		}
		move := taskd.CampaignMove(chi.URLParam(r, "move"))
		switch move {
		case taskd.MoveStart, taskd.MovePause, taskd.MoveResume, taskd.MoveStop:
		default:
			return 0, nil, taskd.Errorf(taskd.CodeNotFound, "no route POST %s", r.URL.Path)
		}
		c, err := cs.engine.Move(r.Context(), ActorFrom(r.Context()), id, move, ifMatch(r))
		return http.StatusOK, c, tagged(w, c.Version(), err)
	})
}
