package taskd

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Window is a maintenance window: it opens at each wall time of a cron expression in a
// time zone and stays open for Minutes. A task with windows is claimed only while one
// of them is open; a dispatch made inside one may run and finish after it closes.
type Window struct {
	Cron     string `json:"cron"`
	Minutes  int    `json:"minutes"`
	TimeZone string `json:"time_zone,omitempty"`
}

// Windows are a task's maintenance windows; empty: always open.
type Windows []Window

// Bounds of windows.
const (
	MaxWindows       = 16
	MaxWindowMinutes = 7 * 24 * 60 // a week
	// MaxWindowWait is how long a once task due outside its windows stays on its
	// users' offers waiting for one to open (beyond the catch-up window): a week.
	MaxWindowWait = 7 * 24 * time.Hour
)

// Validate checks each window: its cron and zone as a cron task's, its minutes within
// bounds. The error names the window (windows[i].field).
func (ws Windows) Validate() error {
	if len(ws) > MaxWindows {
		return Errorf(CodeInvalid, "windows: at most %d, got %d", MaxWindows, len(ws))
	}
	for i, w := range ws {
		if _, err := ParseCron(w.Cron, w.TimeZone); err != nil {
			var e *Error
			if errors.As(err, &e) {
				return &Error{Code: e.Code, Message: "windows[" + strconv.Itoa(i) + "]." + e.Message}
			}
			return err
		}
		if w.Minutes < 1 || w.Minutes > MaxWindowMinutes {
			return Errorf(CodeInvalid, "windows[%d].minutes: must be 1..%d (a week), got %d", i, MaxWindowMinutes, w.Minutes)
		}
	}
	return nil
}

// Normalized is ws with each cron trimmed and each zone named as the zone loads (""
// is UTC); ws must be valid.
func (ws Windows) Normalized() Windows {
	if len(ws) == 0 {
		return nil
	}
	out := make(Windows, len(ws))
	for i, w := range ws {
		c, err := ParseCron(w.Cron, w.TimeZone)
		if err != nil {
			return ws
		}
		out[i] = Window{Cron: c.Expr(), Minutes: w.Minutes, TimeZone: c.Zone()}
	}
	return out
}

// Key is ws in one string, from which WindowsOf gives them back: what a heap entry
// carries. "" for none.
func (ws Windows) Key() string {
	var b strings.Builder
	for i, w := range ws {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(w.Cron + ";" + w.TimeZone + ";" + strconv.Itoa(w.Minutes))
	}
	return b.String()
}

var windowsCache sync.Map // Key -> Windows

// WindowsOf is the windows of a key made by Key ("" is none), parsed once per process.
func WindowsOf(key string) (Windows, error) {
	if key == "" {
		return nil, nil
	}
	if ws, ok := windowsCache.Load(key); ok {
		return ws.(Windows), nil
	}
	ws, err := parseWindowsKey(key)
	if err != nil {
		return nil, err
	}
	windowsCache.Store(key, ws)
	return ws, nil
}

func parseWindowsKey(key string) (Windows, error) {
	var ws Windows
	for _, part := range strings.Split(key, "&") {
		expr, rest, ok1 := strings.Cut(part, ";")
		zone, minutes, ok2 := strings.Cut(rest, ";")
		n, err := strconv.Atoi(minutes)
		if !ok1 || !ok2 || err != nil {
			return nil, Errorf(CodeInvalid, "windows: %q is not a windows key", key)
		}
		ws = append(ws, Window{Cron: expr, Minutes: n, TimeZone: zone})
	}
	return ws, ws.Validate()
}

// ParseWindows reads windows stored as JSON ("" or "null": none).
func ParseWindows(s string) (Windows, error) {
	if s == "" || s == "null" {
		return nil, nil
	}
	var ws Windows
	if err := json.Unmarshal([]byte(s), &ws); err != nil {
		return nil, err
	}
	return ws, nil
}

// OpenAt returns the first instant at or after t at which a window is open (t itself
// when one is), and false when none ever opens again. Without windows it is t.
func (ws Windows) OpenAt(t time.Time) (time.Time, bool) {
	if len(ws) == 0 {
		return t, true
	}
	var first time.Time
	found := false
	for _, w := range ws {
		c, err := CronOf(w.Cron + ";" + w.TimeZone)
		if err != nil {
			continue
		}
		length := time.Duration(w.Minutes) * time.Minute
		// The window opened by the first opening after t - length is open at t if it
		// opened by then: it closes after t.
		if o, ok := c.After(t.Add(-length)); ok && !o.After(t) {
			return t, true
		}
		if o, ok := c.After(t); ok && (!found || o.Before(first)) {
			first, found = o, true
		}
	}
	return first, found
}

// AddOpen returns the instant at which d of open-window time has passed from t: the
// time while no window is open does not count. False when the windows stop opening
// before then (or it takes more than maxOpenSpans openings).
func (ws Windows) AddOpen(t time.Time, d time.Duration) (time.Time, bool) {
	for range maxOpenSpans {
		open, ok := ws.OpenAt(t)
		if !ok {
			return time.Time{}, false
		}
		end := ws.closeAfter(open, open.Add(d))
		if span := end.Sub(open); d <= span {
			return open.Add(d), true
		} else {
			d -= span
		}
		t = end
	}
	return time.Time{}, false
}

// maxOpenSpans bounds the open spans AddOpen walks.
const maxOpenSpans = 10_000

// closeAfter is when the windows, open at t, next are all closed: the end of the union
// of the open spans that hold t, or follow one another without a gap; or limit, if they
// are open until then (windows that join end to end may never close).
func (ws Windows) closeAfter(t, limit time.Time) time.Time {
	end := t
	for grew := true; grew && end.Before(limit); {
		grew = false
		for _, w := range ws {
			c, err := CronOf(w.Cron + ";" + w.TimeZone)
			if err != nil {
				continue
			}
			length := time.Duration(w.Minutes) * time.Minute
			o, ok := c.After(end.Add(-length))
			if !ok || o.After(end) {
				continue // not open at end
			}
			for n, more := c.After(o); more && !n.After(end); n, more = c.After(n) {
				o = n // the latest opening at or before end
			}
			if e := o.Add(length); e.After(end) {
				end, grew = e, true
			}
		}
	}
	return end
}

// Open reports whether a window is open at t (always, without windows).
func (ws Windows) Open(t time.Time) bool {
	at, ok := ws.OpenAt(t)
	return ok && at.Equal(t)
}
