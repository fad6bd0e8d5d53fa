// Package logcollapse keeps an outage from flooding the logs: a slog.Handler that
// writes a warning once per window, counts its repeats, and sums them up in one record
// when the window ends.
//
// During an outage every failed request logs the same warning; thousands of identical
// lines hide the first one, which says what broke. Handler writes the first record of a
// key (level, message and `component` attribute) and holds back the repeats that follow
// within the window (default 10s). When the window ends it writes one summary record:
// the message with " (repeated)", `repeated` (how many were held back), `window`, and
// the attributes of the last record held back, through the same derived logger (so a
// component given with Logger.With is kept). The next repeat after the window is
// written again and opens a new window.
//
// Records below the level (default WARN) pass through untouched. Metrics are counted
// elsewhere and are not affected.
//
// A window's summary is written by a timer when the window ends, or earlier when the
// next record of its key comes late, or by Close, which the binaries call at shutdown
// so that no count is lost.
package logcollapse

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// DefaultWindow is how long repeats of a record are held back when Options.Window is 0.
const DefaultWindow = 10 * time.Second

// Timer is a function scheduled by Clock.AfterFunc; *time.Timer is one.
type Timer interface {
	Stop() bool
}

// Clock tells the time and runs a function later. Tests inject a fake one to end
// windows without sleeping.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Options configures a Handler. The zero value collapses WARN and above over
// DefaultWindow on the wall clock.
type Options struct {
	// Window is how long repeats of a record are held back (default DefaultWindow).
	Window time.Duration
	// Level is the lowest level collapsed (default slog.LevelWarn); records below it
	// pass through.
	Level slog.Leveler
	// Clock defaults to the wall clock.
	Clock Clock
}

// Handler collapses repeated records (see the package documentation). Handlers derived
// with WithAttrs and WithGroup share one state, so a repeat is recognized whichever
// logger it comes through. It is safe for concurrent use.
type Handler struct {
	next slog.Handler // the wrapped handler, with this handler's attributes and groups
	// ops are the WithAttrs and WithGroup calls that made next from the root, replayed
	// to write a summary with its counts at the top level.
	ops       []op
	grouped   bool   // a group is open: record attributes are not at the top level
	component string // the component attribute given to WithAttrs outside any group
	st        *state
}

// op is one WithGroup (group set) or WithAttrs call.
type op struct {
	group string
	attrs []slog.Attr
}

// key says which records are repeats of one another.
type key struct {
	level     slog.Level
	msg       string
	component string
}

// state is shared by a Handler and every handler derived from it.
type state struct {
	root   slog.Handler
	window time.Duration
	level  slog.Leveler
	clock  Clock

	mu      sync.Mutex
	windows map[key]*window
	seq     uint64 // orders the windows, so Close writes summaries in the order they opened
	sweepAt int    // prune windows that ended quietly when the map reaches this size
	closed  bool
}

// window is the state of one key from its first record until the window ends.
type window struct {
	seq      uint64
	end      time.Time
	repeated int
	// sample is the last record held back, with its context and the handler that got
	// it; the summary is written with them.
	sample slog.Record
	ctx    context.Context
	from   *Handler
	timer  Timer
}

// summary is a window's summary, ready to be written outside the lock.
type summary struct {
	repeated int
	window   time.Duration
	sample   slog.Record
	ctx      context.Context
	from     *Handler
}

// New wraps next.
func New(next slog.Handler, opts Options) *Handler {
	st := &state{root: next, window: opts.Window, level: opts.Level, clock: opts.Clock,
		windows: map[key]*window{}, sweepAt: 64}
	if st.window <= 0 {
		st.window = DefaultWindow
	}
	if st.level == nil {
		st.level = slog.LevelWarn
	}
	if st.clock == nil {
		st.clock = realClock{}
	}
	return &Handler{next: next, st: st}
}

// Enabled reports whether the wrapped handler handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle writes r, or holds it back as a repeat of a record written within the window.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	st := h.st
	if r.Level < st.level.Level() {
		return h.next.Handle(ctx, r)
	}
	k := key{level: r.Level, msg: r.Message, component: h.componentOf(r)}
	now := st.clock.Now()

	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return h.next.Handle(ctx, r)
	}
	w := st.windows[k]
	var late *summary
	if w != nil && !now.Before(w.end) {
		late = st.endLocked(k, w) // its timer has not fired yet
		w = nil
	}
	if w == nil {
		st.openLocked(k, now)
		st.mu.Unlock()
		st.write(late)
		return h.next.Handle(ctx, r)
	}
	w.repeated++
	w.sample, w.ctx, w.from = r.Clone(), context.WithoutCancel(ctx), h
	if w.timer == nil {
		w.timer = st.clock.AfterFunc(w.end.Sub(now), func() { st.expire(k, w) })
	}
	st.mu.Unlock()
	return nil
}

// WithAttrs returns a handler that adds attrs and shares h's state.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	d := h.derive(op{attrs: slices.Clone(attrs)})
	d.next = h.next.WithAttrs(attrs)
	if !h.grouped {
		for _, a := range attrs {
			if a.Key == "component" {
				d.component = a.Value.Resolve().String()
			}
		}
	}
	return d
}

// WithGroup returns a handler that opens group name and shares h's state.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	d := h.derive(op{group: name})
	d.next = h.next.WithGroup(name)
	d.grouped = true
	return d
}

func (h *Handler) derive(o op) *Handler {
	d := *h
	d.ops = append(slices.Clip(h.ops), o)
	return &d
}

// Close writes the summaries of the windows still open and stops holding records
// back: afterwards every record passes through. It closes every handler derived from
// the same New, and returns nil.
func (h *Handler) Close() error {
	st := h.st
	st.mu.Lock()
	st.closed = true
	open := make([]*window, 0, len(st.windows))
	keys := make(map[*window]key, len(st.windows))
	for k, w := range st.windows {
		open = append(open, w)
		keys[w] = k
	}
	slices.SortFunc(open, func(a, b *window) int { return cmp.Compare(a.seq, b.seq) })
	var due []*summary
	for _, w := range open {
		if s := st.endLocked(keys[w], w); s != nil {
			due = append(due, s)
		}
	}
	st.mu.Unlock()
	for _, s := range due {
		st.write(s)
	}
	return nil
}

// componentOf is r's component attribute, or else the one given to WithAttrs.
func (h *Handler) componentOf(r slog.Record) string {
	c := h.component
	if !h.grouped {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "component" {
				c = a.Value.Resolve().String()
			}
			return true
		})
	}
	return c
}

// openLocked starts k's window at now, and now and then forgets windows that ended
// with no repeat (they have no timer to remove them).
func (st *state) openLocked(k key, now time.Time) {
	if len(st.windows) >= st.sweepAt {
		for k, w := range st.windows {
			if w.repeated == 0 && !now.Before(w.end) {
				delete(st.windows, k)
			}
		}
		st.sweepAt = max(64, 2*len(st.windows))
	}
	st.seq++
	st.windows[k] = &window{seq: st.seq, end: now.Add(st.window)}
}

// endLocked forgets k's window w and returns its summary, nil if nothing was held back.
func (st *state) endLocked(k key, w *window) *summary {
	delete(st.windows, k)
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.repeated == 0 {
		return nil
	}
	return &summary{repeated: w.repeated, window: st.window, sample: w.sample, ctx: w.ctx, from: w.from}
}

// expire ends k's window w when its time is up, unless a later record or Close already
// did.
func (st *state) expire(k key, w *window) {
	st.mu.Lock()
	if st.windows[k] != w {
		st.mu.Unlock()
		return
	}
	s := st.endLocked(k, w)
	st.mu.Unlock()
	st.write(s)
}

// write writes a summary: the counts at the top level, then the attributes and groups
// of the logger that got the sample, then the sample's own attributes.
func (st *state) write(s *summary) {
	if s == nil {
		return
	}
	h := st.root.WithAttrs([]slog.Attr{slog.Int("repeated", s.repeated), slog.String("window", s.window.String())})
	for _, o := range s.from.ops {
		if o.group != "" {
			h = h.WithGroup(o.group)
		} else {
			h = h.WithAttrs(o.attrs)
		}
	}
	r := slog.NewRecord(st.clock.Now(), s.sample.Level, s.sample.Message+" (repeated)", s.sample.PC)
	s.sample.Attrs(func(a slog.Attr) bool {
		r.AddAttrs(a)
		return true
	})
	// There is no caller to give an error to: the wrapped handler's own errors are
	// dropped here as they would be by a Logger.
	_ = h.Handle(s.ctx, r)
}
