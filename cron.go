package taskd

import (
	"strings"
	"sync"
	"time"
	// Embedded zone data: a server in a container without /usr/share/zoneinfo still
	// knows every IANA zone a task may name.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// Cron is a rotate task's wall-clock schedule: a five-field cron expression ("m h dom
// mon dow", or one of @yearly, @monthly, @weekly, @daily, @hourly) read in an IANA time
// zone. Its occurrences are the wall times the expression names, each at most once:
//
//   - a wall time that does not exist that day (a daylight-saving gap) happens at the
//     first instant after the gap;
//   - a wall time that happens twice (the hour repeated when clocks go back) happens
//     once, the first time.
//
// The expression is parsed by robfig/cron; the wall times are walked here, because the
// library's own Next runs a job twice in a repeated hour and skips one in a gap.
type Cron struct {
	expr string
	loc  *time.Location
	spec *cron.SpecSchedule
}

// cronHorizon is how far ahead an occurrence is looked for: a cron with none within it
// never fires (29 February on a Monday comes round within 28 years; a Feb 29 at all
// within 8).
const cronHorizon = 30 * 366 * 24 * time.Hour

// MaxCronLen bounds a cron expression's length.
const MaxCronLen = 128

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron parses expr in zone (an IANA name; "" is UTC). A bad expression is
// invalid_argument naming cron, an unknown zone one naming time_zone, and an expression
// that never fires (31 February) is unsatisfiable naming cron.
func ParseCron(expr, zone string) (*Cron, error) {
	loc, err := LoadZone(zone)
	if err != nil {
		return nil, err
	}
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return nil, Errorf(CodeInvalid, "cron: must be a cron expression \"m h dom mon dow\", got an empty string")
	case len(expr) > MaxCronLen:
		return nil, Errorf(CodeInvalid, "cron: at most %d characters, got %d", MaxCronLen, len(expr))
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return nil, Errorf(CodeInvalid, "cron: give the zone in time_zone, not in the expression")
	case strings.HasPrefix(expr, "@every"):
		return nil, Errorf(CodeInvalid, "cron: @every is not a wall-clock schedule; use space_minutes")
	case strings.ContainsAny(expr, ";|"):
		return nil, Errorf(CodeInvalid, "cron: %q is not a cron expression", expr)
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, Errorf(CodeInvalid, "cron: %q: %v (want \"m h dom mon dow\")", expr, err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, Errorf(CodeInvalid, "cron: %q is not a wall-clock schedule", expr)
	}
	c := &Cron{expr: expr, loc: loc, spec: spec}
	from := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, ok := c.After(from); !ok {
		return nil, Errorf(CodeUnsatisfiable, "cron: %q never fires", expr)
	}
	return c, nil
}

// LoadZone loads an IANA time zone by name ("" and "UTC" are UTC); an unknown one is
// invalid_argument naming time_zone.
func LoadZone(zone string) (*time.Location, error) {
	if zone == "" || zone == "UTC" {
		return time.UTC, nil
	}
	if len(zone) > 64 || strings.ContainsAny(zone, ";| ") || zone == "Local" {
		return nil, Errorf(CodeInvalid, "time_zone: %q is not an IANA time zone name", zone)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, Errorf(CodeInvalid, "time_zone: unknown time zone %q", zone)
	}
	return loc, nil
}

// Expr is the expression as given (trimmed).
func (c *Cron) Expr() string { return c.expr }

// Zone is the zone's IANA name ("UTC" for UTC).
func (c *Cron) Zone() string { return c.loc.String() }

// Location is the zone the expression is read in.
func (c *Cron) Location() *time.Location { return c.loc }

// Key is the cron's expression and zone in one string, from which CronOf gives it back:
// what a heap entry carries.
func (c *Cron) Key() string { return c.expr + ";" + c.Zone() }

var cronCache sync.Map // Key -> *Cron

// CronOf is the cron of a key made by Key, parsed once per process.
func CronOf(key string) (*Cron, error) {
	if c, ok := cronCache.Load(key); ok {
		return c.(*Cron), nil
	}
	expr, zone, ok := strings.Cut(key, ";")
	if !ok {
		return nil, Errorf(CodeInvalid, "cron: %q is not a cron key", key)
	}
	c, err := ParseCron(expr, zone)
	if err != nil {
		return nil, err
	}
	cronCache.Store(key, c)
	return c, nil
}

// starBit marks a field given as * (the library's convention): day of month and day of
// week then combine with "and", not cron's "or".
const starBit = 1 << 63

// After returns the first occurrence strictly after t, or false when there is none
// within cronHorizon.
func (c *Cron) After(t time.Time) (time.Time, bool) {
	// A wall time repeated by a change back may have its first instant before t and
	// its second after: wall times are walked from well before t's own, and the first
	// whose instant is after t wins.
	// (No zone moves its clocks back by more than two hours.)
	local := t.In(c.loc)
	local = time.Date(local.Year(), local.Month(), local.Day(), local.Hour(), 0, 0, 0, time.UTC).Add(-3 * time.Hour)
	day := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, time.UTC)
	end := day.Add(cronHorizon)
	for hour0 := local.Hour(); day.Before(end); day, hour0 = day.AddDate(0, 0, 1), 0 {
		if !c.dayMatches(day) {
			continue
		}
		for h := hour0; h < 24; h++ {
			if c.spec.Hour&(1<<uint(h)) == 0 {
				continue
			}
			for m := 0; m < 60; m++ {
				if c.spec.Minute&(1<<uint(m)) == 0 {
					continue
				}
				if at := c.instant(day.Year(), day.Month(), day.Day(), h, m); at.After(t) {
					return at, true
				}
			}
		}
	}
	return time.Time{}, false
}

// First returns the first occurrence at or after t.
func (c *Cron) First(t time.Time) (time.Time, bool) {
	return c.After(t.Add(-time.Nanosecond))
}

// Has reports whether t is an occurrence.
func (c *Cron) Has(t time.Time) bool {
	at, ok := c.First(t)
	return ok && at.Equal(t)
}

// dayMatches reports whether the calendar day (a midnight in UTC standing for the
// zone's date) is one the expression names.
func (c *Cron) dayMatches(day time.Time) bool {
	if c.spec.Month&(1<<uint(day.Month())) == 0 {
		return false
	}
	dom := c.spec.Dom&(1<<uint(day.Day())) != 0
	dow := c.spec.Dow&(1<<uint(day.Weekday())) != 0
	if c.spec.Dom&starBit != 0 || c.spec.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// instant is the first instant at which the zone's clock reads the wall time; a wall
// time inside a gap is the first instant after the gap.
func (c *Cron) instant(y int, mo time.Month, d, h, m int) time.Time {
	at := time.Date(y, mo, d, h, m, 0, 0, c.loc)
	if start, end := at.ZoneBounds(); (start.IsZero() || at.Sub(start) > 3*time.Hour) && (end.IsZero() || end.Sub(at) > 3*time.Hour) {
		return at.UTC() // no change of the clocks near: the one instant
	}
	wall := time.Date(y, mo, d, h, m, 0, 0, time.UTC)
	var first time.Time
	// The zone's offsets around the wall time: the instant is wall minus one of them.
	for _, probe := range []time.Duration{-36 * time.Hour, 0, 36 * time.Hour} {
		_, off := wall.Add(probe).In(c.loc).Zone()
		at := wall.Add(-time.Duration(off) * time.Second)
		if l := at.In(c.loc); l.Hour() == h && l.Minute() == m && l.Day() == d && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	if !first.IsZero() {
		return first.UTC()
	}
	// In a gap: the zone's clock jumps over the wall time. Go's time.Date gives an
	// instant near the jump, on either side of it (for a gap at midnight, on the day
	// before); the jump itself is a bound of the zone in effect there: its start when
	// the instant's wall clock reads later than the wall time asked for, else its end.
	start, end := at.ZoneBounds()
	if reads := time.Date(at.Year(), at.Month(), at.Day(), at.Hour(), at.Minute(), 0, 0, time.UTC); reads.After(wall) {
		return start.UTC()
	}
	return end.UTC()
}
